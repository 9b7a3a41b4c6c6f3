// CurlApi: libcurl, loaded with dlopen on the agent's first request, so that `nsbox run` never pays for it.
#pragma once

#include <curl/curl.h>

#include "sandbox/base/status.h"

namespace nsbox::agent {

// The libcurl entry points the agent uses. Linking libcurl directly would load it and its ~30 dependent
// shared libraries (TLS, GSSAPI, LDAP, HTTP/2 …) at every start of nsbox: several milliseconds on each
// sandbox's cold start, for a library only `nsbox agent` needs.
struct CurlApi {
  decltype(&curl_global_init) global_init;
  decltype(&curl_easy_init) easy_init;
  decltype(&curl_easy_setopt) easy_setopt;
  decltype(&curl_easy_perform) easy_perform;
  decltype(&curl_easy_getinfo) easy_getinfo;
  decltype(&curl_easy_cleanup) easy_cleanup;
  decltype(&curl_easy_strerror) easy_strerror;
  decltype(&curl_slist_append) slist_append;
  decltype(&curl_slist_free_all) slist_free_all;
  decltype(&curl_getdate) getdate;
};

// Loads libcurl.so.4 once (thread-safe) and runs curl_global_init; the error names the missing library.
StatusOr<const CurlApi*> Curl();

}  // namespace nsbox::agent
