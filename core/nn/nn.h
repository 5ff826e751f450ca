// The nn umbrella header: modules, layers, containers, the functional API and init.
#pragma once

#include "core/nn/activation.h"
#include "core/nn/container.h"
#include "core/nn/conv.h"
#include "core/nn/functional.h"
#include "core/nn/init.h"
#include "core/nn/linear.h"
#include "core/nn/module.h"
#include "core/nn/normalization.h"
#include "core/nn/pooling.h"
#include "core/nn/rnn.h"
#include "core/nn/transformer.h"
