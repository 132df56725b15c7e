// Plain HTTP(S) requests through libcurl: any method, headers in and out, a body, a timeout. The
// one blocking libcurl request path of the tree (the cloud providers through the retrying
// transport in http_retry.h; token and metadata fetches, the metadata emulator's notices and the
// detector load bench directly; only the detector's event-driven poller drives curl_multi
// itself). Errors name the method and the URL without its query string; headers (which carry
// tokens and keys) never appear in a message.
#ifndef SPOTDNN_PROVISIONER_LAUNCHER_HTTP_H_
#define SPOTDNN_PROVISIONER_LAUNCHER_HTTP_H_

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace spotdnn::launcher {

// A plain HTTP response.
struct HttpResponse {
  long status = 0;
  std::string body;
  // Response headers by lowercase name (the last one wins when a name repeats).
  std::map<std::string, std::string> headers;

  // The header's value, or "" (`name` in any case).
  std::string Header(absl::string_view name) const;
};

// One request.
struct HttpRequest {
  std::string method = "GET";
  std::string url;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;  // sent when not empty, or always for POST, PUT and PATCH
  absl::Duration timeout = absl::Seconds(30);
};

// Sends `request`. UNAVAILABLE on a transport failure (connection refused, timeout, TLS), naming
// the method and the URL without its query; any HTTP status is a response, not an error.
absl::StatusOr<HttpResponse> HttpSend(const HttpRequest& request);

// `url` without its query string and fragment (for messages).
std::string UrlForMessages(absl::string_view url);

// "scheme://host[:port]" of an absolute URL ("" when it has none): to check that a URL a server
// handed back (a next page, an operation to poll) points at the same service before a token is
// sent to it.
std::string UrlOrigin(absl::string_view url);

// key=value pairs joined with '&', each percent-encoded (RFC 3986 unreserved kept).
std::string QueryString(const std::vector<std::pair<std::string, std::string>>& params);

}  // namespace spotdnn::launcher

#endif  // SPOTDNN_PROVISIONER_LAUNCHER_HTTP_H_
