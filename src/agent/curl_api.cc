// CurlApi: dlopen of Debian's libcurl.so.4 and lookup of each entry point, once per process.
#include "src/agent/curl_api.h"

#include <dlfcn.h>

#include <mutex>

#include <fmt/format.h>

namespace nsbox::agent {

StatusOr<const CurlApi*> Curl() {
  static std::once_flag once;
  static CurlApi api;
  static Status error;
  std::call_once(once, [] {
    void* lib = ::dlopen("libcurl.so.4", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      error = Status::Error(fmt::format("cannot load libcurl ({}): install Debian's libcurl4", ::dlerror()));
      return;
    }
    auto load = [&](auto& slot, const char* name) {
      void* symbol = ::dlsym(lib, name);
      if (!symbol && error.ok()) error = Status::Error(fmt::format("libcurl.so.4 lacks {}", name));
      slot = reinterpret_cast<std::remove_reference_t<decltype(slot)>>(symbol);
    };
    load(api.global_init, "curl_global_init");
    load(api.easy_init, "curl_easy_init");
    load(api.easy_setopt, "curl_easy_setopt");
    load(api.easy_perform, "curl_easy_perform");
    load(api.easy_getinfo, "curl_easy_getinfo");
    load(api.easy_cleanup, "curl_easy_cleanup");
    load(api.easy_strerror, "curl_easy_strerror");
    load(api.slist_append, "curl_slist_append");
    load(api.slist_free_all, "curl_slist_free_all");
    load(api.getdate, "curl_getdate");
    if (error.ok() && api.global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) error = Status::Error("curl_global_init failed");
  });
  if (!error.ok()) return error;
  return &api;
}

}  // namespace nsbox::agent
