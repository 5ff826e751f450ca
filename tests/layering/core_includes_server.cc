// Compiled with anvil_core's include roots only: must fail, core/ cannot see server/.
#include "server/status.h"
