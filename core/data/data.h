// The data pipeline's umbrella header: datasets, samplers, transforms and the DataLoader.
#pragma once

#include "core/data/collate.h"
#include "core/data/dataloader.h"
#include "core/data/dataset.h"
#include "core/data/datasets/csv.h"
#include "core/data/datasets/digits.h"
#include "core/data/datasets/idx.h"
#include "core/data/datasets/image_folder.h"
#include "core/data/datasets/synthetic.h"
#include "core/data/example.h"
#include "core/data/sample_random.h"
#include "core/data/sampler.h"
#include "core/data/transforms.h"
