// The live status page on the metrics address: `/` is a self-contained HTML page (no external
// scripts or styles) that polls `/status.json` and draws the jobs table and each job's loss
// curve in the browser, so a single-machine user sees training without Grafana.
#pragma once

#include <string>

#include "server/store.h"

namespace anvil::server {

// The newest `max_jobs` jobs with their state, progress and loss series (train per metric
// interval, validation per epoch), as JSON. A series longer than `max_points` is thinned to
// every k-th point plus the last, so a week-long job costs the page what a short one does
// (StreamMetrics has the full resolution).
std::string status_json(const Store& store, int64_t max_jobs = 20, size_t max_points = 2000);
const std::string& status_html();

}  // namespace anvil::server
