// In-place optimizer updates with torch.optim semantics: piper.SGD (momentum,
// dampening, Nesterov, L2 weight decay) and piper.AdamW (decoupled weight decay,
// bias correction by the 1-based optimizer step number), at the scheduled learning rate of the
// step. An optional last input, the global gradient norm, skips the update when it is not
// finite (as AMP's GradScaler skips optimizer.step()) and scales the gradient by the clipping
// factor (torch.nn.utils.clip_grad_norm_) when the update clips.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "engine/cpu/kernel_registry.h"
#include "engine/cpu/optimizer_args.h"
#include "engine/cpu/optimizer_math.h"
#include "engine/cpu/parallel.h"

namespace piper::engine::cpu {
namespace {

bool skipped(const float* norm) { return norm != nullptr && !std::isfinite(*norm); }

std::unique_ptr<PreparedKernel> sgd_factory(const KernelArgs& args) {
  const SgdSettings sgd = check_sgd(args);
  const TensorView& p = args.input(0);
  float* m = sgd.momentum_buffer;
  const float* norm = sgd.norm;
  const double momentum = sgd.momentum, dampening = sgd.dampening, weight_decay = sgd.weight_decay;
  const bool nesterov = sgd.nesterov;
  return make_kernel([n = p.elements(), pp = p.as<float>(), pg = args.input(1).as<const float>(), m,
                      norm, update = update_schedule(args, norm), mu = static_cast<float>(momentum),
                      keep = static_cast<float>(1.0 - dampening),
                      wd = static_cast<float>(weight_decay), nesterov](const StepContext& context) {
    if (skipped(norm)) return;
    const bool first = context.update == 1;
    const auto lr = static_cast<float>(update.lr_at(context));
    const float scale = norm != nullptr ? clip_scale(update.max_norm, *norm) : 1.0f;
    parallel_for(n, kParallelGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        float g = pg[i] * scale;
        if (wd != 0.0f) g += wd * pp[i];
        if (m != nullptr) {
          m[i] = first ? g : mu * m[i] + keep * g;
          g = nesterov ? g + mu * m[i] : m[i];
        }
        pp[i] -= lr * g;
      }
    });
  });
}

// One AdamW step's factors (torch.optim.AdamW); grad_scale is the clipping factor.
struct AdamWStep {
  float decay, b1, b2, one_minus_b1, one_minus_b2, step_size, bias_correction2_sqrt, epsilon,
      grad_scale;
};

// Updates elements [0, n) of distinct tensors; the factors are a by-value argument, so that
// GCC keeps them in registers and vectorises the loop (stores through p, m and v could alias
// a float read through a reference).
void adamw_update(AdamWStep s, float* __restrict p, float* __restrict m, float* __restrict v,
                  const float* __restrict grad, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = grad[i] * s.grad_scale;
    p[i] *= s.decay;
    m[i] = m[i] * s.b1 + s.one_minus_b1 * g;
    v[i] = v[i] * s.b2 + s.one_minus_b2 * g * g;
    const float denom = std::sqrt(v[i]) / s.bias_correction2_sqrt + s.epsilon;
    p[i] -= s.step_size * (m[i] / denom);
  }
}

std::unique_ptr<PreparedKernel> adamw_factory(const KernelArgs& args) {
  const AdamWSettings adamw = check_adamw(args);
  const float* norm = adamw.norm;
  const double beta1 = adamw.beta1, beta2 = adamw.beta2, eps = adamw.eps,
               weight_decay = adamw.weight_decay;
  const TensorView& p = args.input(0);
  return make_kernel([n = p.elements(), pp = p.as<float>(), pg = args.input(1).as<const float>(),
                      pm = args.input(2).as<float>(), pv = args.input(3).as<float>(), norm,
                      update = update_schedule(args, norm), beta1, beta2, eps,
                      weight_decay](const StepContext& context) {
    if (skipped(norm)) return;
    const double t = static_cast<double>(context.update);
    const double lr = update.lr_at(context);
    const AdamWStep s{static_cast<float>(1.0 - lr * weight_decay),
                      static_cast<float>(beta1),
                      static_cast<float>(beta2),
                      static_cast<float>(1.0 - beta1),
                      static_cast<float>(1.0 - beta2),
                      static_cast<float>(lr / (1.0 - std::pow(beta1, t))),
                      static_cast<float>(std::sqrt(1.0 - std::pow(beta2, t))),
                      static_cast<float>(eps),
                      norm != nullptr ? clip_scale(update.max_norm, *norm) : 1.0f};
    parallel_for(n, kParallelGrain, [&](int64_t begin, int64_t end) {
      adamw_update(s, pp + begin, pm + begin, pv + begin, pg + begin, end - begin);
    });
  });
}

// Lanes the sum of squares of a block keeps apart, so that its loop vectorises (a single sum
// would wait for each add) and is limited by memory rather than by the adds' latency.
constexpr int64_t kSquareLanes = 8;

// The sum of squares of x[0, n) in double, by blocks of a fixed size added in order, so that
// it does not change with the thread count.
double sum_of_squares(const float* x, int64_t n) {
  const int64_t blocks = (n + kParallelGrain - 1) / kParallelGrain;
  std::vector<double> partial(static_cast<size_t>(blocks));
  parallel_for(blocks, 1, [&](int64_t first, int64_t last) {
    for (int64_t b = first; b < last; ++b) {
      const int64_t begin = b * kParallelGrain, end = std::min(n, begin + kParallelGrain);
      double lanes[kSquareLanes] = {};
      int64_t i = begin;
      for (; i + kSquareLanes <= end; i += kSquareLanes) {
        for (int64_t l = 0; l < kSquareLanes; ++l) {
          lanes[l] += static_cast<double>(x[i + l]) * x[i + l];
        }
      }
      double sum = 0.0;
      for (; i < end; ++i) sum += static_cast<double>(x[i]) * x[i];
      for (double lane : lanes) sum += lane;
      partial[static_cast<size_t>(b)] = sum;
    }
  });
  return std::accumulate(partial.begin(), partial.end(), 0.0);
}

// piper.SumSquares: this rank's share of the squared global gradient norm.
std::unique_ptr<PreparedKernel> sum_squares_factory(const KernelArgs& args) {
  return make_kernel([slices = squared_slices(args)](const StepContext&) {
    double sum = 0.0;
    for (size_t i = 0; i < slices.data.size(); ++i) {
      sum += sum_of_squares(slices.data[i], slices.counts[i]);
    }
    *slices.y = static_cast<float>(sum);
  });
}

}  // namespace

void register_optimizer_kernels(KernelTable& table) {
  table["piper.SGD"] = sgd_factory;
  table["piper.AdamW"] = adamw_factory;
  table["piper.SumSquares"] = sum_squares_factory;
}

}  // namespace piper::engine::cpu
