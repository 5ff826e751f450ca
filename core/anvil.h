// The engine's umbrella header: tensors, ops, autograd.
#pragma once

#include "core/autograd/engine.h"
#include "core/autograd/function.h"
#include "core/autograd/grad_mode.h"
#include "core/autograd/gradcheck.h"
#include "core/ops/functions.h"
#include "core/tensor/random.h"
#include "core/tensor/tensor.h"
#include "core/util/thread_pool.h"
