#include "formats/schedule_view.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "formats/error.h"
#include "formats/plan_directory.h"
#include "formats/plan_file.h"
#include "formats/plan_text.h"

namespace piper::formats {
namespace {

struct Row {
  int rank = 0;
  std::string stream;
  std::vector<const plan::PlannedTask*> tasks;
};

// Rows in rank order, each rank's streams in the order its plan lists them,
// "compute" first.
std::vector<Row> rows_of(const std::vector<plan::Plan>& plans) {
  std::vector<Row> rows;
  for (const plan::Plan& plan : plans) {
    const int rank = static_cast<int>(plan.header().rank());
    if (plan.planned_tasks_size() == 0 && !plan.has_planned_step()) {
      throw Error("the plan of rank " + std::to_string(rank) +
                  " carries no planned timeline (written by an older piper-plan); re-plan");
    }
    std::vector<std::string> streams;
    for (const plan::Stream& stream : plan.streams()) streams.push_back(stream.name());
    for (const plan::PlannedTask& task : plan.planned_tasks()) {
      if (std::find(streams.begin(), streams.end(), task.stream()) == streams.end()) {
        streams.push_back(task.stream());
      }
    }
    // The compute streams on top ("compute", then "compute2"...: DualPipe's two stages, so an
    // overlapped pair's two tasks sit one above the other), wherever the plan listed them.
    std::stable_partition(streams.begin(), streams.end(),
                          [](const std::string& name) { return name.starts_with("compute"); });
    std::stable_partition(streams.begin(), streams.end(),
                          [](const std::string& name) { return name == "compute"; });
    if (streams.empty()) streams.push_back("compute");
    for (const std::string& stream : streams) {
      Row row{rank, stream, {}};
      for (const plan::PlannedTask& task : plan.planned_tasks()) {
        if (task.stream() == stream) row.tasks.push_back(&task);
      }
      rows.push_back(std::move(row));
    }
  }
  return rows;
}

double step_of(const std::vector<plan::Plan>& plans) {
  double step = 0;
  for (const plan::Plan& plan : plans) {
    step = std::max(step, plan.planned_step().step_s());
    for (const plan::PlannedTask& task : plan.planned_tasks()) step = std::max(step, task.end_s());
  }
  return step;
}

std::string seconds_text(double seconds) {
  char text[32];
  if (seconds < 1e-3) {
    std::snprintf(text, sizeof text, "%.3g us", seconds * 1e6);
  } else if (seconds < 1) {
    std::snprintf(text, sizeof text, "%.3g ms", seconds * 1e3);
  } else {
    std::snprintf(text, sizeof text, "%.3g s", seconds);
  }
  return text;
}

std::string percent(double fraction) {
  char text[16];
  std::snprintf(text, sizeof text, "%.1f%%", fraction * 100);
  return text;
}

// The legend's kinds: compute tasks by pass, comm tasks by kind.
struct Style {
  const char* key;
  const char* name;
  const char* colour;
};
constexpr Style kStyles[] = {
    {"F", "forward (F)", "#4e79a7"},
    {"B", "backward (B)", "#e15759"},
    {"BI", "input gradient (BI)", "#f28e2b"},
    {"BW", "weight gradient (BW)", "#edc948"},
    {"U", "update (U)", "#59a14f"},
    {"send/recv", "send / recv (S, R)", "#76b7b2"},
    {"loss", "loss send / recv (L)", "#000000"},
    {"all_reduce", "all-reduce (AR)", "#b07aa1"},
    {"reduce_scatter", "reduce-scatter (RS)", "#ff9da7"},
    {"all_gather", "all-gather (AG)", "#9c755f"},
    {"all_to_all", "all-to-all (A2A)", "#bab0ac"},
    {"broadcast", "broadcast (BC)", "#8cd17d"},
};
constexpr const char* kOtherColour = "#d3d3d3";
// Compute passes of direction 1 (DualPipe's microbatches entering at the last rank,
// DualPipeV's return leg): darker hues of the same passes.
constexpr Style kReturnStyles[] = {
    {"F", "forward, direction 1", "#1d3f6e"},
    {"B", "backward, direction 1", "#8b1a1c"},
    {"BI", "input gradient, direction 1", "#a3520c"},
    {"BW", "weight gradient, direction 1", "#8c7318"},
};

std::string style_key(const plan::PlannedTask& task) {
  if (task.kind() == "compute") {
    const std::string pass = pass_to_text(task.pass());
    return pass == "?" ? "F" : pass;
  }
  if (task.kind() == "send" || task.kind() == "recv") {
    return task.label().starts_with("L") ? "loss" : "send/recv";
  }
  return task.kind();
}

const char* colour_of(const std::string& key, int direction = 0) {
  if (direction == 1) {
    for (const Style& style : kReturnStyles) {
      if (key == style.key) return style.colour;
    }
  }
  for (const Style& style : kStyles) {
    if (key == style.key) return style.colour;
  }
  return kOtherColour;
}

// "s5 c1": a pipeline stage's task's stage and chunk; empty for other tasks.
std::string stage_text(const plan::PlannedTask& task) {
  if (!task.has_stage()) return "";
  return "s" + std::to_string(task.stage()) + " c" + std::to_string(task.chunk());
}

// Whether two of a rank's planned tasks are an overlapped pair: compute tasks (not reshards)
// over the same span on two compute streams (planner/sim/step_simulation.h runs a pair so).
bool paired(const plan::PlannedTask& a, const plan::PlannedTask& b) {
  return a.kind() == "compute" && b.kind() == "compute" && a.stream() != b.stream() &&
         a.task() != b.task() && a.start_s() == b.start_s() && a.end_s() == b.end_s() &&
         a.end_s() > a.start_s();
}

std::string escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string number(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f", value);
  return text;
}

// A tick spacing of 1, 2 or 5 times a power of ten giving at most `ticks` ticks.
double tick_spacing(double span, int ticks) {
  const double raw = span / ticks;
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  for (double factor : {1.0, 2.0, 5.0, 10.0}) {
    if (factor * power >= raw) return factor * power;
  }
  return 10 * power;
}

}  // namespace

std::vector<plan::Plan> read_plan_directory(const std::string& dir) {
  const std::vector<std::string> paths = rank_plan_paths(dir, "'" + dir + "'");
  std::vector<plan::Plan> plans;
  for (int rank = 0; rank < static_cast<int>(paths.size()); ++rank) {
    plans.push_back(read_plan_file(paths[rank]));
    const plan::Header& header = plans.back().header();
    if (static_cast<int>(header.rank()) != rank) {
      throw Error(paths[rank] + " holds the plan of rank " + std::to_string(header.rank()));
    }
    if (header.plan_id() != plans.front().header().plan_id()) {
      throw Error(paths[rank] + " comes from another planning run than " + paths.at(0) +
                  " (plan id " + header.plan_id() + ", not " + plans.front().header().plan_id() +
                  "); re-plan into an empty directory");
    }
  }
  return plans;
}

std::string schedule_text(const std::vector<plan::Plan>& plans, int width) {
  const std::vector<Row> rows = rows_of(plans);
  const double step = step_of(plans);
  width = std::max(width, 10);
  const double per_column = step > 0 ? step / width : 0;
  std::ostringstream out;
  out << "planned step " << seconds_text(step) << " on " << plans.size()
      << " rank(s) (piper-plan's cost model); one character = " << seconds_text(per_column)
      << ", '.' idle\n";
  size_t name_width = 0;
  std::vector<std::string> names;
  for (const Row& row : rows) {
    names.push_back("rank " + std::to_string(row.rank) + " " + row.stream);
    name_width = std::max(name_width, names.back().size());
  }
  for (size_t r = 0; r < rows.size(); ++r) {
    std::string line(static_cast<size_t>(width), '.');
    for (const plan::PlannedTask* task : rows[r].tasks) {
      if (per_column <= 0) break;
      const int first =
          std::clamp(static_cast<int>(std::lround(task->start_s() / per_column)), 0, width - 1);
      const int last =
          std::clamp(static_cast<int>(std::lround(task->end_s() / per_column)), first + 1, width);
      for (int c = first; c < last; ++c) {
        const size_t i = static_cast<size_t>(c - first);
        line[c] = i < task->label().size() ? task->label()[i] : '=';
      }
    }
    out << names[r] << std::string(name_width - names[r].size(), ' ') << " |" << line << "|";
    const bool last_of_rank = r + 1 == rows.size() || rows[r + 1].rank != rows[r].rank;
    if (last_of_rank) {
      const plan::PlannedStep& planned = plans.at(rows[r].rank).planned_step();
      out << " busy " << seconds_text(planned.busy_s()) << ", bubble "
          << percent(planned.bubble_fraction());
    }
    out << "\n";
  }
  out << "F forward, B backward, BI/BW input/weight gradient, U update, S/R send/recv, "
         "AR all-reduce, RS reduce-scatter, AG all-gather, A2A all-to-all (tensor-parallel "
         "ones over their compute task)\n";
  return out.str();
}

std::string schedule_svg(const std::vector<plan::Plan>& plans) {
  const std::vector<Row> rows = rows_of(plans);
  const double step = step_of(plans);
  constexpr double kLeft = 150, kTimeline = 900, kRight = 20, kTop = 40, kRowHeight = 26,
                   kRowGap = 4, kAxis = 36, kLegendRow = 18;
  const double scale = step > 0 ? kTimeline / step : 0;
  const double rows_bottom = kTop + static_cast<double>(rows.size()) * (kRowHeight + kRowGap);
  const double legend_top = rows_bottom + kAxis;
  const double width = kLeft + kTimeline + kRight;
  constexpr size_t kLegendEntries = std::size(kStyles) + std::size(kReturnStyles);
  const double height = legend_top + (kLegendEntries + 1) / 2 * kLegendRow + 10;

  std::ostringstream svg;
  svg << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << number(width) << "\" height=\""
      << number(height) << "\" viewBox=\"0 0 " << number(width) << " " << number(height)
      << "\" font-family=\"sans-serif\" font-size=\"11\">\n"
      << "<rect x=\"0\" y=\"0\" width=\"" << number(width) << "\" height=\"" << number(height)
      << "\" fill=\"white\"/>\n"
      << "<text x=\"" << number(kLeft) << "\" y=\"22\" font-size=\"14\">planned step "
      << escape(seconds_text(step)) << " on " << plans.size()
      << " rank(s) (piper-plan's cost model)</text>\n";

  for (size_t r = 0; r < rows.size(); ++r) {
    const Row& row = rows[r];
    const double y = kTop + static_cast<double>(r) * (kRowHeight + kRowGap);
    const plan::PlannedStep& planned = plans.at(row.rank).planned_step();
    svg << "<g class=\"row\" data-rank=\"" << row.rank << "\" data-stream=\"" << escape(row.stream)
        << "\">\n"
        << "<text x=\"6\" y=\"" << number(y + kRowHeight / 2 + 4) << "\">rank " << row.rank << " "
        << escape(row.stream) << "</text>\n"
        << "<rect class=\"lane\" x=\"" << number(kLeft) << "\" y=\"" << number(y) << "\" width=\""
        << number(kTimeline) << "\" height=\"" << number(kRowHeight)
        << "\" fill=\"#f2f2f2\"><title>rank " << row.rank << ": busy "
        << escape(seconds_text(planned.busy_s())) << ", bubble "
        << escape(percent(planned.bubble_fraction())) << "</title></rect>\n";
    for (const plan::PlannedTask* task : row.tasks) {
      const double x = kLeft + task->start_s() * scale;
      // Transfers are short (a loss send is one scalar): wide enough to see.
      const double least = task->kind() == "compute" ? 0.5 : 3.0;
      const double w = std::max((task->end_s() - task->start_s()) * scale, least);
      const std::string key = style_key(*task);
      const std::string stage = stage_text(*task);
      svg << "<rect class=\"task\" data-kind=\"" << escape(key) << "\" data-task=\"" << task->task()
          << "\"";
      if (task->has_stage()) {
        svg << " data-stage=\"" << task->stage() << "\" data-chunk=\"" << task->chunk()
            << "\" data-direction=\"" << task->direction() << "\"";
      }
      svg << " x=\"" << number(x) << "\" y=\"" << number(y + 1) << "\" width=\"" << number(w)
          << "\" height=\"" << number(kRowHeight - 2) << "\" fill=\""
          << colour_of(key, task->direction()) << "\" stroke=\"white\" stroke-width=\"0.5\"><title>"
          << escape(task->label()) << ": task " << task->task() << ", " << escape(task->kind())
          << ", microbatch " << task->microbatch();
      if (task->has_stage()) {
        svg << ", stage " << task->stage() << ", chunk " << task->chunk() << ", direction "
            << task->direction();
      }
      svg << ", " << escape(seconds_text(task->start_s())) << " to "
          << escape(seconds_text(task->end_s())) << "</title></rect>\n";
      const size_t longest = std::max(task->label().size(), stage.size());
      if (w >= 7.0 * static_cast<double>(longest) + 2) {
        const double text_y = stage.empty() ? y + kRowHeight / 2 + 4 : y + kRowHeight / 2 - 1;
        svg << "<text x=\"" << number(x + w / 2) << "\" y=\"" << number(text_y)
            << "\" text-anchor=\"middle\" fill=\"white\">" << escape(task->label()) << "</text>\n";
        if (!stage.empty()) {
          svg << "<text class=\"stage\" x=\"" << number(x + w / 2) << "\" y=\""
              << number(y + kRowHeight - 4) << "\" text-anchor=\"middle\" font-size=\"8\" "
              << "fill=\"white\">" << escape(stage) << "</text>\n";
        }
      }
    }
    svg << "</g>\n";
  }

  // Overlapped pairs: one black border around the two tasks, on adjacent compute rows.
  svg << "<g class=\"pairs\">\n";
  for (size_t r = 0; r + 1 < rows.size(); ++r) {
    if (rows[r + 1].rank != rows[r].rank) continue;
    for (const plan::PlannedTask* upper : rows[r].tasks) {
      for (const plan::PlannedTask* lower : rows[r + 1].tasks) {
        if (!paired(*upper, *lower)) continue;
        const double y = kTop + static_cast<double>(r) * (kRowHeight + kRowGap);
        svg << "<rect class=\"pair\" data-rank=\"" << rows[r].rank << "\" data-tasks=\""
            << upper->task() << " " << lower->task() << "\" x=\""
            << number(kLeft + upper->start_s() * scale) << "\" y=\"" << number(y) << "\" width=\""
            << number((upper->end_s() - upper->start_s()) * scale) << "\" height=\""
            << number(2 * kRowHeight + kRowGap) << "\" fill=\"none\" stroke=\"black\" "
            << "stroke-width=\"1.5\"><title>" << escape(upper->label()) << " and "
            << escape(lower->label()) << " overlapped</title></rect>\n";
      }
    }
  }
  svg << "</g>\n";

  // Time axis.
  svg << "<g class=\"axis\">\n<line x1=\"" << number(kLeft) << "\" y1=\"" << number(rows_bottom)
      << "\" x2=\"" << number(kLeft + kTimeline) << "\" y2=\"" << number(rows_bottom)
      << "\" stroke=\"black\"/>\n";
  if (step > 0) {
    const double spacing = tick_spacing(step, 10);
    for (double t = 0; t <= step * (1 + 1e-9); t += spacing) {
      const double x = kLeft + t * scale;
      svg << "<line x1=\"" << number(x) << "\" y1=\"" << number(rows_bottom) << "\" x2=\""
          << number(x) << "\" y2=\"" << number(rows_bottom + 5) << "\" stroke=\"black\"/>\n"
          << "<text x=\"" << number(x) << "\" y=\"" << number(rows_bottom + 17)
          << "\" text-anchor=\"middle\">" << escape(seconds_text(t)) << "</text>\n";
    }
  }
  svg << "</g>\n";

  // Legend, two columns.
  svg << "<g class=\"legend\">\n";
  for (size_t i = 0; i < kLegendEntries; ++i) {
    const Style& style =
        i < std::size(kStyles) ? kStyles[i] : kReturnStyles[i - std::size(kStyles)];
    const double x = kLeft + static_cast<double>(i % 2) * 260;
    const double y = legend_top + static_cast<double>(i / 2) * kLegendRow;
    svg << "<rect x=\"" << number(x) << "\" y=\"" << number(y) << "\" width=\"12\" height=\"12\" "
        << "fill=\"" << style.colour << "\"/>\n<text x=\"" << number(x + 18) << "\" y=\""
        << number(y + 10) << "\">" << escape(style.name) << "</text>\n";
  }
  svg << "</g>\n</svg>\n";
  return svg.str();
}

}  // namespace piper::formats
