// The spotdnn.v1.Sample message <-> the profiler's domain Sample. Its own small library
// (spotdnn_sample_convert) so that spotdnn-agent converts samples without linking the profiler's
// fitting and store.
#ifndef SPOTDNN_SERVICES_PROFILER_SAMPLE_CONVERT_H_
#define SPOTDNN_SERVICES_PROFILER_SAMPLE_CONVERT_H_

#include "profiler/sample.h"
#include "spotdnn/v1/profiler.pb.h"

namespace spotdnn::services {

// The message as a domain Sample (every field copied).
profiler::Sample ToDomain(const ::spotdnn::v1::Sample& sample);
// The domain Sample as the message (every field copied).
::spotdnn::v1::Sample ToProto(const profiler::Sample& sample);

}  // namespace spotdnn::services

#endif  // SPOTDNN_SERVICES_PROFILER_SAMPLE_CONVERT_H_
