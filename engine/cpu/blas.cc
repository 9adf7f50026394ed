#include "engine/cpu/blas.h"

#include <cblas.h>
#include <strings.h>
#include <unistd.h>

#include <cstdlib>
#include <mutex>

namespace piper::engine::cpu {
namespace {

// The best kernel set of OpenBLAS's DYNAMIC_ARCH list for this CPU's features (usable ones
// only: __builtin_cpu_supports also checks that the OS saves the vector registers).
std::optional<std::string> best_openblas_core() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vl")) {
    return "SkylakeX";
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
#endif
  return std::nullopt;
}

}  // namespace

std::optional<std::string> openblas_core_override() {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return std::nullopt;
  // Prescott is where a DYNAMIC_ARCH build lands on an x86-64 CPU it does not recognise; no
  // CPU that runs Piper is a Prescott.
  const char* core = openblas_get_corename();
  if (core == nullptr || strcasecmp(core, "Prescott") != 0) return std::nullopt;
  return best_openblas_core();
}

void restart_with_openblas_core(char** argv) {
  const std::optional<std::string> core = openblas_core_override();
  if (!core) return;
  if (setenv("OPENBLAS_CORETYPE", core->c_str(), 1) != 0) return;
  execv("/proc/self/exe", argv);
  unsetenv("OPENBLAS_CORETYPE");  // the exec failed: carry on with the kernels loaded
}

void blas_on_calling_thread() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

}  // namespace piper::engine::cpu
