// Defer: runs a callable when the scope ends, for cleanups that are not worth an RAII class of their own.
#pragma once

#include <utility>

namespace nsbox {

template <typename F>
class Defer {
 public:
  explicit Defer(F f) : f_(std::move(f)) {}
  Defer(const Defer&) = delete;
  Defer& operator=(const Defer&) = delete;
  ~Defer() {
    if (armed_) f_();
  }
  void Cancel() { armed_ = false; }

 private:
  F f_;
  bool armed_ = true;
};

}  // namespace nsbox
