// The control for the probes beside it: with the same include roots an engine header
// compiles, so their failure is the layer rule and not the setup.
#include "core/tensor/tensor.h"
