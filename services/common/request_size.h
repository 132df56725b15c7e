// Request size limits per RPC, applied before a request is parsed. A request's size is bounded by
// the limits every field passes (request_check.h): a Predict cannot need 80 MB, and parsing one
// of 80 MB (40 million empty repeated entries) would take gigabytes before CheckRequest refused
// it. Each unary method of a service is served through a handler that reads the request's bytes,
// refuses them when they are more than its message type can hold within the limits, and only
// then parses them and calls the method.
#ifndef SPOTDNN_SERVICES_COMMON_REQUEST_SIZE_H_
#define SPOTDNN_SERVICES_COMMON_REQUEST_SIZE_H_

#include <cstddef>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "google/protobuf/descriptor.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/support/method_handler.h"
#include "services/common/security.h"

namespace spotdnn::services {

// The smallest limit a method gets.
inline constexpr size_t kMinRequestLimit = 4096;

// The most bytes a serialized message of `type` takes when every field is within the request
// limits (StringLimit, RepeatedLimit), at most `cap`, and at least kMinRequestLimit (room for the
// fields of a newer client). Fields of type bytes (bounded by their handlers, not by the edge
// check) and anything nested deeper than 32 messages count as `cap`; the fields named in
// `unused` (full names, "spotdnn.v1.InstanceType.lifetimes": what a method does not read) count
// as nothing.
size_t MaxMessageBytes(const google::protobuf::Descriptor* type, size_t cap = kMaxMessageBytes,
                       const std::vector<std::string>& unused = {});

// INVALID_ARGUMENT's message for a request of `bytes` to `method` ("/spotdnn.v1.Predictor/
// Predict") over its `limit`.
std::string RequestTooLargeMessage(absl::string_view method, size_t bytes, size_t limit);

// The handlers that serve the unary methods of a generated `Service` with their size limits; a
// service implementation installs them from its constructor with MarkMethodStreamed (see
// InstallSizeLimits).
template <class Service>
class RequestSizeLimits {
 public:
  // One entry: the method's index in the service and its handler (owned by whoever installs it).
  using Entry = std::pair<int, grpc::internal::MethodHandler*>;

  // `service_name`: the service's full name ("spotdnn.v1.Predictor").
  RequestSizeLimits(Service* service, std::string service_name)
      : service_(service), service_name_(std::move(service_name)) {}

  // The fields (full names) the methods added from now on do not read: they count as nothing
  // towards their limits (MaxMessageBytes' `unused`).
  RequestSizeLimits& Unused(std::vector<std::string> fields) {
    unused_ = std::move(fields);
    return *this;
  }

  // Serves `name` (a unary method of Service, e.g. "Predict", called through `method`) with the
  // limit MaxMessageBytes of its request type, or `limit` when given (a request with a bytes
  // field, bounded by a flag).
  template <class Request, class Response>
  RequestSizeLimits& Unary(const std::string& name,
                           grpc::Status (Service::*method)(grpc::ServerContext*, const Request*,
                                                           Response*),
                           size_t limit = 0) {
    const google::protobuf::ServiceDescriptor* descriptor =
        google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(service_name_);
    const google::protobuf::MethodDescriptor* found =
        descriptor == nullptr ? nullptr : descriptor->FindMethodByName(name);
    if (found == nullptr) return *this;
    const size_t max_bytes =
        limit > 0 ? limit : MaxMessageBytes(Request::descriptor(), kMaxMessageBytes, unused_);
    const std::string full = absl::StrCat("/", service_name_, "/", name);
    Service* service = service_;
    entries_.emplace_back(
        found->index(),
        new grpc::internal::StreamedUnaryHandler<grpc::ByteBuffer, grpc::ByteBuffer>(
            [service, method, max_bytes, full](
                grpc::ServerContext* context,
                grpc::ServerUnaryStreamer<grpc::ByteBuffer, grpc::ByteBuffer>* stream) {
              grpc::ByteBuffer in;
              if (!stream->Read(&in)) {
                return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                    absl::StrCat(full, ": the call carried no request message"));
              }
              if (in.Length() > max_bytes) {
                return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                    RequestTooLargeMessage(full, in.Length(), max_bytes));
              }
              Request request;
              if (!grpc::SerializationTraits<Request>::Deserialize(&in, &request).ok()) {
                return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, UnparsableRequest(full));
              }
              Response response;
              const grpc::Status status = (service->*method)(context, &request, &response);
              if (!status.ok()) return status;
              grpc::ByteBuffer out;
              bool own = false;
              const grpc::Status serialized =
                  grpc::SerializationTraits<Response>::Serialize(response, &out, &own);
              if (!serialized.ok()) return serialized;
              stream->Write(out);
              return grpc::Status::OK;
            }));
    return *this;
  }

  // The handlers, for MarkMethodStreamed (which takes ownership of each).
  std::vector<Entry> Take() { return std::move(entries_); }

 private:
  // server.h's UnparsableRequestMessage, without including it here.
  static std::string UnparsableRequest(const std::string& method);

  Service* service_;
  std::string service_name_;
  std::vector<std::string> unused_;
  std::vector<Entry> entries_;
};

std::string UnparsableRequestMessage(absl::string_view method);  // server.h

template <class Service>
std::string RequestSizeLimits<Service>::UnparsableRequest(const std::string& method) {
  return UnparsableRequestMessage(method);
}

}  // namespace spotdnn::services

#endif  // SPOTDNN_SERVICES_COMMON_REQUEST_SIZE_H_
