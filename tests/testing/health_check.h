// The gRPC health service asked without its generated stubs (Debian's gRPC ships none): raw bytes
// of grpc.health.v1.HealthCheckRequest/Response.
#ifndef SPOTDNN_TESTS_TESTING_HEALTH_CHECK_H_
#define SPOTDNN_TESTS_TESTING_HEALTH_CHECK_H_

#include <chrono>
#include <string>
#include <vector>

#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "grpcpp/impl/codegen/client_unary_call.h"
#include "grpcpp/support/byte_buffer.h"

namespace spotdnn::testing_util {

// The health answers: SERVING is field 1 = 1, NOT_SERVING field 1 = 2.
inline constexpr char kServing[] = "\x08\x01";
inline constexpr char kNotServing[] = "\x08\x02";

inline grpc::ByteBuffer Bytes(const std::string& data) {
  grpc::Slice slice(data);
  return grpc::ByteBuffer(&slice, 1);
}

inline std::string Text(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  if (!buffer.Dump(&slices).ok()) return "";
  std::string out;
  for (const grpc::Slice& s : slices) {
    out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return out;
}

// The health service's answer for `service` ("" = the whole server) in `answer`.
inline grpc::Status HealthCheck(grpc::Channel& channel, const std::string& service,
                                std::string* answer) {
  std::string request;
  if (!service.empty()) request = std::string("\x0a", 1) + char(service.size()) + service;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::ByteBuffer response;
  const grpc::Status s = grpc::internal::BlockingUnaryCall(
      &channel,
      grpc::internal::RpcMethod("/grpc.health.v1.Health/Check",
                                grpc::internal::RpcMethod::NORMAL_RPC),
      &context, Bytes(request), &response);
  *answer = Text(response);
  return s;
}

}  // namespace spotdnn::testing_util

#endif  // SPOTDNN_TESTS_TESTING_HEALTH_CHECK_H_
