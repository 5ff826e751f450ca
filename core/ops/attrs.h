// The non-tensor arguments of one op call: one of the typed argument structs of
// core/ops/op_args.h, the one the row's Args column names. An empty OpAttrs stands for the
// row's defaults (a default-constructed struct of its type), so `dispatch(op, inputs, {})`
// reads like a call without keyword arguments; any other type is an internal error that
// names the row, the type it takes and the type that came (checked once per call by the
// dispatcher, and again by get<T>()).
// Thread-safety: a value type; a const OpAttrs may be read from any thread.
#pragma once

#include <string_view>
#include <type_traits>
#include <variant>

#include "core/ops/op_args.h"

namespace anvil {

using OpArgs = std::variant<
#define ANVIL_ARGS_TYPE(T) T,
    ANVIL_OP_ARGS(ANVIL_ARGS_TYPE)
#undef ANVIL_ARGS_TYPE
        std::monostate>;  // never held: it only closes the list above

// The name of the argument struct at `index` of OpArgs (for messages).
std::string_view op_args_name(size_t index);

// Whether T is one of the argument structs (a trait, so it can gate a constructor without
// the hard error a static_assert would be inside a substitution).
template <typename T>
inline constexpr bool kIsOpArgs = false
#define ANVIL_ARGS_IS(U) || std::is_same_v<T, U>
    ANVIL_OP_ARGS(ANVIL_ARGS_IS)
#undef ANVIL_ARGS_IS
    ;

// The index of T in OpArgs: the value the table's Args column stores for a row.
template <typename T>
constexpr size_t op_args_index() {
  constexpr size_t kIndex = [] {
    size_t i = 0;
    bool found = false;
#define ANVIL_ARGS_INDEX(U)   \
  if (!found) {               \
    if (std::is_same_v<T, U>) \
      found = true;           \
    else                      \
      ++i;                    \
  }
    ANVIL_OP_ARGS(ANVIL_ARGS_INDEX)
#undef ANVIL_ARGS_INDEX
    return i;
  }();
  static_assert(kIndex < std::variant_size_v<OpArgs> - 1, "not an op argument struct (core/ops/op_args.h)");
  return kIndex;
}

[[noreturn]] void throw_wrong_op_args(size_t wanted, size_t held);

class OpAttrs {
 public:
  OpAttrs() = default;
  template <typename T, typename = std::enable_if_t<kIsOpArgs<std::decay_t<T>>>>
  OpAttrs(T&& args) : args_(std::forward<T>(args)) {}  // NOLINT: implicit, so a struct passes as attrs

  // The arguments as T: the held struct, or T's defaults when none is held.
  template <typename T>
  const T& get() const {
    if (const T* held = std::get_if<T>(&args_)) return *held;
    if (std::holds_alternative<NoArgs>(args_)) {
      static const T kDefaults{};
      return kDefaults;
    }
    throw_wrong_op_args(op_args_index<T>(), args_.index());
  }

  size_t index() const { return args_.index(); }
  bool empty() const { return std::holds_alternative<NoArgs>(args_); }

 private:
  OpArgs args_;
};

// Applies `fn` to the input's geometry (see ViewFn); returns nullopt when the view cannot be
// expressed on that geometry (only possible for Reshape, whose strides depend on the input's).
std::optional<Geometry> apply_view(const ViewFn& fn, const Geometry& in);

}  // namespace anvil
