// CLI11 for nsbox's verbs, without the static std::ios_base::Init that GCC 12's <iostream> puts into every file
// including it: constructing the eight standard streams, and with them std::locale, costs each start of nsbox about
// 0.2-0.3 ms of page faults on a PVM guest (tools/bench), and a run prints nothing through them. CLI11 prints help,
// versions and parse errors to std::cout and std::cerr: StandardStreams (below) sets them up first, where it does.
#pragma once

#include <ios>

// Where <iostream> defines that object (GCC before 13 and libstdc++), its declarations are given here instead; its
// include guard then keeps CLI11's own #include <iostream> from adding the object.
#if defined(__GLIBCXX__) && !defined(_GLIBCXX_IOSTREAM) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
#define _GLIBCXX_IOSTREAM 1
#include <istream>
#include <ostream>
namespace std {
extern istream cin;
extern ostream cout;
extern ostream cerr;
extern ostream clog;
extern wistream wcin;
extern wostream wcout;
extern wostream wcerr;
extern wostream wclog;
}  // namespace std
#endif

#include <CLI/CLI.hpp>

namespace nsbox::cli {

// Constructs std::cout and the other standard streams (once per process, whoever asks first) before anything uses
// them: hold one where CLI11 or anyone may print through them.
class StandardStreams {
  std::ios_base::Init init_;
};

}  // namespace nsbox::cli
