// A model whose structure depends on its input, written as plain C++: the graph is whatever
// ran. Each sample takes a different number of refinement steps (until its update is small),
// and the loss backpropagates through exactly the steps that sample took.
//
// Trains it to map points on a circle to the angle's sine, printing the loss and how many
// steps the model chose; there is no static graph to declare and no "dynamic" mode to enable.
#include <cstdio>

#include "core/anvil.h"
#include "core/nn/nn.h"
#include "core/optim/optimizer.h"

using namespace anvil;

class IterativeRefiner : public nn::Module {
 public:
  IterativeRefiner() : Module("IterativeRefiner") {
    encode = register_module("encode", std::make_shared<nn::Linear>(2, 16));
    step = register_module("step", std::make_shared<nn::Linear>(16, 16));
    readout = register_module("readout", std::make_shared<nn::Linear>(16, 1));
  }
  // One sample [2] -> ([1], steps taken). The loop's trip count is data: it reads a value.
  std::pair<Tensor, int> run(const Tensor& x) {
    Tensor h = tanh(encode->forward(x));
    int steps = 0;
    while (steps < 12) {
      // A damped fixed-point step: h moves half way towards tanh(step(h)).
      const Tensor next = h + (tanh(step->forward(h)) - h) * 0.5;
      const double change = (next - h).abs().max().item<double>();
      h = next;
      ++steps;
      if (change < 0.01) break;  // converged: this sample stops here
    }
    return {readout->forward(h), steps};
  }
  std::shared_ptr<nn::Linear> encode, step, readout;
};

int main() {
  manual_seed(0);
  IterativeRefiner model;
  optim::Adam opt(model.parameters(), {{"lr", 1e-2}});
  for (int epoch = 0; epoch <= 300; ++epoch) {
    const Tensor angles = rand({16}) * 6.2831853;
    const Tensor points = stack({cos(angles), sin(angles)}, 1);
    opt.zero_grad();
    Tensor loss = zeros({});
    int total_steps = 0;
    for (int64_t i = 0; i < 16; ++i) {  // per sample: each builds its own graph
      auto [y, steps] = model.run(points[i]);
      loss = loss + square(y.squeeze(0) - sin(angles[i] * 2.0));
      total_steps += steps;
    }
    loss = loss / 16.0;
    loss.backward();
    opt.step();
    if (epoch % 50 == 0) {
      std::printf("epoch %3d  loss %.4f  mean refinement steps %.2f\n", epoch, loss.item<double>(), total_steps / 16.0);
    }
  }
  return 0;
}
