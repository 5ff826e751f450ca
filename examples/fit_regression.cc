// Fits y = 3x - 2 + noise with a two-layer MLP written with raw tensor ops and autograd,
// printing the loss as it falls. Built by `make demo` until the service exists.
#include <cstdio>

#include "core/anvil.h"

using namespace anvil;

int main() {
  manual_seed(0);
  Tensor x = rand({256, 1}) * 4 - 2;
  Tensor y = x * 3 - 2 + randn({256, 1}) * 0.1;

  Tensor w1 = (randn({1, 32}) * 0.5).requires_grad_();
  Tensor b1 = zeros({32}).requires_grad_();
  Tensor w2 = (randn({32, 1}) * 0.2).requires_grad_();
  Tensor b2 = zeros({1}).requires_grad_();
  const double lr = 0.05;

  for (int step = 0; step <= 400; ++step) {
    Tensor h = tanh(matmul(x, w1) + b1);
    Tensor pred = matmul(h, w2) + b2;
    Tensor loss = mean(square(pred - y));
    loss.backward();
    {
      NoGradGuard no_grad;  // the update itself is not part of the graph
      for (Tensor* p : {&w1, &b1, &w2, &b2}) {
        p->sub_(p->grad() * lr);
        p->set_grad(Tensor());
      }
    }
    if (step % 50 == 0) std::printf("step %3d  loss %.6f\n", step, loss.item<double>());
  }
  Tensor probe = tensor({-1.0, 0.0, 1.0}, kFloat32).reshape({3, 1});
  NoGradGuard no_grad;
  Tensor out = matmul(tanh(matmul(probe, w1) + b1), w2) + b2;
  std::printf("f(-1), f(0), f(1) = %s   (target -5, -2, 1)\n", to_string(out.reshape({3})).c_str());
  return 0;
}
