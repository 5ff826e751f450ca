// Compiled with anvil_workers' include roots only: must fail, workers/ cannot see server/.
#include "server/scheduler.h"
