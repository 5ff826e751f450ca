// Collation: turning the samples of one batch into one batch Example.
//
// default_collate stacks every tensor field along a new leading dim (a 0-dim int64 label
// becomes a [B] vector, a [C, H, W] image a [B, C, H, W] batch) and recurses into nested
// Examples. Every sample must have the same field names in the same order and, per field,
// the same dtype and shape; the error names the field (as a path, "pair.left"), the
// offending sample's position in the batch, and both shapes, so "stack expects each tensor
// to be equal size" never has to be decoded by hand.
#pragma once

#include <functional>
#include <vector>

#include "core/data/example.h"

namespace anvil::data {

// A custom collate receives the samples in batch order and returns the batch.
using CollateFn = std::function<Example(std::vector<Example>& samples)>;

Example default_collate(std::vector<Example>& samples);

}  // namespace anvil::data
