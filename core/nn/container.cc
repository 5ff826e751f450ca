// Containers: see container.h.
#include "core/nn/container.h"

#include <optional>
#include <typeinfo>

#include "core/amp/autocast.h"
#include "core/nn/activation.h"
#include "core/nn/activation_probe.h"
#include "core/nn/linear.h"
#include "core/util/error.h"

namespace anvil::nn {

Sequential::Sequential(std::initializer_list<std::shared_ptr<Module>> modules) : Sequential() {
  for (const auto& m : modules) push_back(m);
}

void Sequential::push_back(std::shared_ptr<Module> module) {
  AppendIndexedChild(module);
  layers_.push_back(std::move(module));
}

namespace {

// A Linear directly followed by a ReLU (those exact classes: a subclass may override forward)
// runs as one linear_relu op. No hook can observe the activation in between (an open
// ActivationProbe is given the fused output as the ReLU's), and the values
// and gradients are the ops' own; what changes is one pass over the activation instead of
// two, and one autograd node instead of two.
bool LinearThenRelu(const std::vector<std::shared_ptr<Module>>& layers, size_t i) {
  return i + 1 < layers.size() && typeid(*layers[i]) == typeid(Linear) && typeid(*layers[i + 1]) == typeid(ReLU);
}

}  // namespace

void Sequential::replace(size_t i, std::shared_ptr<Module> module) {
  ANVIL_CHECK_INDEX(i < layers_.size(), "Sequential::replace: index ", i, " is out of range for ", layers_.size(),
                    " layers");
  ReplaceChild(std::to_string(i), module);
  layers_[i] = std::move(module);
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor y = x;
  for (size_t i = 0; i < layers_.size(); ++i) {
    try {
      // A layer kept out of autocast: float32 in, autocast off inside (as PyTorch's recipe,
      // `with autocast(enabled=False): layer(x.float())`).
      std::optional<AutocastGuard> outside_autocast;
      if (!layers_[i]->autocast() && autocast::is_enabled(y.device().type)) {
        outside_autocast.emplace(y.device().type, std::nullopt, false);
        if (y.dtype() == kBFloat16 || y.dtype() == kFloat16) y = y.to(kFloat32);
      }
      if (LinearThenRelu(layers_, i)) {
        y = static_cast<Linear&>(*layers_[i]).forward_relu(y);
        ++i;  // the ReLU ran inside; the doctor's probe still sees its output as the ReLU's
        record_activation(*layers_[i], ActivationKind::kRelu, y);
        continue;
      }
      y = layers_[i]->forward(y);
    } catch (const IndexError& e) {
      throw IndexError("Sequential layer " + std::to_string(i) + " (" + layers_[i]->type_name() + "): " + e.what());
    } catch (const TypeError& e) {
      throw TypeError("Sequential layer " + std::to_string(i) + " (" + layers_[i]->type_name() + "): " + e.what());
    } catch (const NotImplementedError&) {
      throw;
    } catch (const OutOfMemoryError& e) {  // stays RESOURCE_EXHAUSTED for the service
      throw OutOfMemoryError("Sequential layer " + std::to_string(i) + " (" + layers_[i]->type_name() +
                             "): " + e.what());
    } catch (const Error& e) {
      // Name the layer, so a shape error in a 20-layer model points at its place.
      throw Error("Sequential layer " + std::to_string(i) + " (" + layers_[i]->type_name() + "): " + e.what());
    }
  }
  return y;
}

const std::shared_ptr<Module>& Sequential::operator[](size_t i) const {
  ANVIL_CHECK_INDEX(i < layers_.size(), "Sequential: index ", i, " is out of range for ", layers_.size(), " layers");
  return layers_[i];
}

ModuleList::ModuleList(std::initializer_list<std::shared_ptr<Module>> modules) : ModuleList() {
  for (const auto& m : modules) push_back(m);
}

void ModuleList::push_back(std::shared_ptr<Module> module) {
  AppendIndexedChild(module);
  items_.push_back(std::move(module));
}

const std::shared_ptr<Module>& ModuleList::operator[](size_t i) const {
  ANVIL_CHECK_INDEX(i < items_.size(), "ModuleList: index ", i, " is out of range for ", items_.size(), " modules");
  return items_[i];
}

void ModuleDict::insert(const std::string& name, std::shared_ptr<Module> module) {
  register_module(name, module);
  items_.emplace_back(name, std::move(module));
}

bool ModuleDict::contains(const std::string& name) const {
  for (const auto& [n, m] : items_) {
    if (n == name) return true;
  }
  return false;
}

const std::shared_ptr<Module>& ModuleDict::operator[](const std::string& name) const {
  for (const auto& [n, m] : items_) {
    if (n == name) return m;
  }
  throw IndexError("ModuleDict: no module named '" + name + "'");
}

std::vector<std::string> ModuleDict::keys() const {
  std::vector<std::string> out;
  for (const auto& [n, m] : items_) out.push_back(n);
  return out;
}

}  // namespace anvil::nn
