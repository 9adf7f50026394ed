#include "engine/runtime/checkpoint_schedule.h"

#include <cstring>
#include <ostream>

namespace piper::engine {
namespace {

volatile std::sig_atomic_t caught_signal = 0;

void on_stop_signal(int signal) { caught_signal = signal; }

// The first signal any rank caught, 0 when none: every rank stops at the same step.
int signal_on_any_rank(Session& session) {
  const std::vector<std::string> every_rank =
      session.gather_from_every_rank(std::to_string(static_cast<int>(caught_signal)));
  for (const std::string& value : every_rank) {
    if (std::stoi(value) != 0) return std::stoi(value);
  }
  return 0;
}

}  // namespace

CheckpointSchedule::CheckpointSchedule(Session& session, std::optional<CheckpointOptions> options,
                                       int64_t steps, uint64_t seed, std::string data,
                                       std::optional<formats::TokenStream> tokens)
    : session_(session),
      options_(std::move(options)),
      steps_(steps),
      seed_(seed),
      data_(std::move(data)),
      tokens_(std::move(tokens)) {
  if (!options_) return;
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  // Transfers in flight carry on: the run stops at the step boundary.
  action.sa_flags = SA_RESTART;
  caught_signal = 0;
  sigaction(SIGTERM, &action, &previous_term_);
  sigaction(SIGINT, &action, &previous_int_);
}

CheckpointSchedule::~CheckpointSchedule() {
  if (!options_) return;
  sigaction(SIGTERM, &previous_term_, nullptr);
  sigaction(SIGINT, &previous_int_, nullptr);
}

int64_t CheckpointSchedule::resume(std::ostream& out) {
  if (!options_ || !options_->resume) return 0;
  const std::optional<std::string> latest = latest_checkpoint(options_->directory);
  const bool rank0 = session_.plan().header().rank() == 0;
  if (!latest) {
    if (rank0) out << "no checkpoint in " << options_->directory << ": starting at step 0\n";
    return 0;
  }
  const TrainingPosition position = load_checkpoint(session_, *latest, seed_);
  const bool same_stream = position.tokens && tokens_ ? position.tokens->same_windows(*tokens_)
                                                      : !position.tokens && !tokens_;
  if (!same_stream) {
    throw Error("--resume: checkpoint '" + *latest + "' was trained on " +
                (position.tokens ? position.tokens->describe() : position.data) +
                ", this run reads " + (tokens_ ? tokens_->describe() : data_) +
                ": the token windows after step " + std::to_string(position.step) +
                " would not continue its stream; resume with its --tokens file, --token-dtype "
                "and --token-inputs");
  }
  if (position.step > steps_) {
    throw Error("--resume: checkpoint '" + *latest + "' is at step " +
                std::to_string(position.step) + ", past --steps " + std::to_string(steps_) +
                " (the step the run ends at); raise --steps");
  }
  if (rank0) {
    out << "resumed from " << *latest << " (step " << position.step << ", "
        << position.optimizer_steps << " optimizer updates)\n";
  }
  return position.step;
}

void CheckpointSchedule::after_step(int64_t step, std::ostream& out) {
  if (!options_) return;
  const int signal = signal_on_any_rank(session_);
  const bool due = step == steps_ || (options_->save_every > 0 && step % options_->save_every == 0);
  if (due || signal != 0) save(step, out);
  if (signal != 0) {
    throw Interrupted("stopped by " + std::string(strsignal(signal)) + " after step " +
                          std::to_string(step) + ", saved to " +
                          step_folder(options_->directory, step) + "; continue with --resume",
                      signal);
  }
}

void CheckpointSchedule::save(int64_t step, std::ostream& out) {
  const TrainingPosition position{step, session_.updates_done(), seed_, data_, tokens_};
  const std::string folder =
      save_checkpoint(session_, options_->directory, position, options_->keep);
  if (session_.plan().header().rank() == 0) out << "saved checkpoint " << folder << std::endl;
}

}  // namespace piper::engine
