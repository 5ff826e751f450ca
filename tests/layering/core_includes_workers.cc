// Compiled with anvil_core's include roots only: must fail, core/ cannot see workers/.
#include "workers/worker.h"
