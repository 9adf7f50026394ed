// Pictures of the planned step: the planner's simulated timeline that every
// plan carries (Plan.planned_tasks, Plan.planned_step), one row per rank and
// stream, as text or as SVG. For piper-dump --schedule.
#pragma once

#include <string>
#include <vector>

#include "schemas/plan.pb.h"

namespace piper::formats {

// Reads DIR/rank<N>.plan for N = 0, 1, ... Throws piper::Error when DIR is not
// a directory, holds no rank<N>.plan, misses a rank below the largest, holds
// plans of different planning runs (header.plan_id) or a plan whose header
// names another rank.
std::vector<plan::Plan> read_plan_directory(const std::string& dir);

// One line per rank and stream (the compute stream first, the others in the
// plan's order), `width` characters for the step: each task
// written as its label ("F3", "AR") padded with '=' over its time, '.' where
// the stream is idle; then the rank's busy time and bubble. Throws
// piper::Error when a plan carries no planned timeline (an older planner).
std::string schedule_text(const std::vector<plan::Plan>& plans, int width = 100);

// The same rows as a self-contained SVG: boxes coloured by kind (F, B, BI,
// BW, update, send/recv and each collective), labelled when they fit, with a
// tooltip per box, gaps where a stream idles, a time axis and a legend. Each
// row is a <g class="row" data-rank=".." data-stream=".."> holding one
// <rect class="task" data-kind=".."> per task. Throws as schedule_text does.
std::string schedule_svg(const std::vector<plan::Plan>& plans);

}  // namespace piper::formats
