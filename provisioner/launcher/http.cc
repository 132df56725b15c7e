#include "provisioner/launcher/http.h"

#include <curl/curl.h>

#include <mutex>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "provisioner/launcher/sigv4.h"

namespace spotdnn::launcher {
namespace {

void CurlInit() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

size_t AppendBody(char* data, size_t size, size_t count, void* user) {
  static_cast<std::string*>(user)->append(data, size * count);
  return size * count;
}

size_t AppendHeader(char* data, size_t size, size_t count, void* user) {
  auto* headers = static_cast<std::map<std::string, std::string>*>(user);
  absl::string_view line(data, size * count);
  // A new status line (after a redirect or a 100 Continue) starts a new set of headers.
  if (absl::StartsWith(line, "HTTP/")) headers->clear();
  const size_t colon = line.find(':');
  if (colon != absl::string_view::npos) {
    (*headers)[absl::AsciiStrToLower(absl::StripAsciiWhitespace(line.substr(0, colon)))] =
        std::string(absl::StripAsciiWhitespace(line.substr(colon + 1)));
  }
  return size * count;
}

}  // namespace

std::string HttpResponse::Header(absl::string_view name) const {
  auto it = headers.find(absl::AsciiStrToLower(name));
  return it == headers.end() ? std::string() : it->second;
}

std::string UrlForMessages(absl::string_view url) {
  return std::string(url.substr(0, url.find_first_of("?#")));
}

std::string UrlOrigin(absl::string_view url) {
  const size_t scheme = url.find("://");
  if (scheme == absl::string_view::npos) return "";
  const size_t end = url.find_first_of("/?#", scheme + 3);
  return absl::AsciiStrToLower(url.substr(0, end));
}

std::string QueryString(const std::vector<std::pair<std::string, std::string>>& params) {
  std::string out;
  for (const auto& [key, value] : params) {
    absl::StrAppend(&out, out.empty() ? "" : "&", UriEncode(key, false), "=",
                    UriEncode(value, false));
  }
  return out;
}

absl::StatusOr<HttpResponse> HttpSend(const HttpRequest& request) {
  CurlInit();
  CURL* curl = curl_easy_init();
  if (curl == nullptr) return absl::InternalError("curl_easy_init failed");
  curl_slist* list = nullptr;
  for (const auto& [name, value] : request.headers) {
    list = curl_slist_append(list, absl::StrCat(name, ": ", value).c_str());
  }
  list = curl_slist_append(list, "Expect:");  // no 100-continue round trip
  HttpResponse response;
  curl_easy_setopt(curl, CURLOPT_URL, request.url.c_str());
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, list);
  const bool with_body = !request.body.empty() || request.method == "POST" ||
                         request.method == "PUT" || request.method == "PATCH";
  if (with_body) {
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, request.body.c_str());
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE, static_cast<long>(request.body.size()));
  }
  if (request.method == "HEAD") {
    curl_easy_setopt(curl, CURLOPT_NOBODY, 1L);
  } else if (request.method != "GET" && !(request.method == "POST" && with_body)) {
    curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, request.method.c_str());
  }
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS,
                   static_cast<long>(absl::ToInt64Milliseconds(request.timeout)));
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, &AppendBody);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &response.body);
  curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, &AppendHeader);
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, &response.headers);
  CURLcode rc = curl_easy_perform(curl);
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &response.status);
  curl_slist_free_all(list);
  curl_easy_cleanup(curl);
  if (rc != CURLE_OK) {
    return absl::UnavailableError(absl::StrCat(request.method, " ", UrlForMessages(request.url),
                                               ": ", curl_easy_strerror(rc)));
  }
  return response;
}

}  // namespace spotdnn::launcher
