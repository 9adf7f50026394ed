// What a kernel found wrong in its data on the device (an index out of range): written to
// device memory by report_fault() (device.cuh), reported by the host after the stream
// finishes (CudaContext::check_faults). The first fault wins.
#pragma once

#include <cstdint>

namespace piper::engine::cuda {

struct DeviceFault {
  int32_t code;  // 0: none; else the code CudaContext::fault_code() gave
  int64_t value;
  int64_t position;
};

}  // namespace piper::engine::cuda
