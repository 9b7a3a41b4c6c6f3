// JavaMainClass: which class of a one-file Java program is its own, read from the source's tokens.
#pragma once

#include <string>
#include <string_view>

namespace nsbox::cli {

// The class a one-file Java program runs as, and whose name its file takes ({java_class} in the language table):
// its public top-level type (javac wants it in a file of that name), else the first top-level type that declares a
// static main method, else "Main". Comments and string literals are skipped; a name with characters outside ASCII
// is not taken (Main then, and javac says what it wants).
std::string JavaMainClass(std::string_view source);

}  // namespace nsbox::cli
