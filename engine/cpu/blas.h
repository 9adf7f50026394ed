// How the CPU backend uses OpenBLAS: its kernel set, and BLAS calls that run on the calling
// thread (the kernels split GEMMs over parallel.h's pool themselves).
#pragma once

#include <optional>
#include <string>

namespace piper::engine::cpu {

// Debian 12's OpenBLAS 0.3.21, a DYNAMIC_ARCH build, picks its kernels by CPU model number and
// falls back to its Prescott (SSE3) kernels on models it predates, such as Intel Emerald Rapids
// (family 6, model 207): GEMMs then run several times slower. When OpenBLAS has fallen back
// although the CPU and the OS support AVX-512 or AVX2 with FMA, returns the kernel set to name
// in OPENBLAS_CORETYPE ("SkylakeX" or "Haswell"); nothing when OpenBLAS recognised the CPU, when
// OPENBLAS_CORETYPE is set already, or when no better kernel set fits.
std::optional<std::string> openblas_core_override();

// OpenBLAS reads OPENBLAS_CORETYPE only as it loads. When openblas_core_override() names a kernel
// set, sets OPENBLAS_CORETYPE and replaces the process with a new run of the same program
// (/proc/self/exe, `argv`, same process id); returns when there is nothing to do or the exec fails.
void restart_with_openblas_core(char** argv);

// Makes each BLAS call run on the calling thread, so that kernels calling BLAS from inside a
// parallel_for do not start BLAS threads of their own. Kernels that call BLAS call this when
// they are prepared; it affects the whole process.
void blas_on_calling_thread();

}  // namespace piper::engine::cpu
