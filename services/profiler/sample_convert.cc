#include "services/profiler/sample_convert.h"

namespace spotdnn::services {

profiler::Sample ToDomain(const ::spotdnn::v1::Sample& in) {
  profiler::Sample s;
  s.job_id = in.job_id();
  s.worker_id = in.worker_id();
  s.instance_type = in.instance_type();
  s.gpu_type = in.gpu_type();
  s.gpus = in.gpus();
  s.batch_size = in.batch_size();
  s.step = in.step();
  s.wall_time_s = in.wall_time_s();
  s.iteration_time_s = in.iteration_time_s();
  s.loss = in.loss();
  s.bytes_sent = in.bytes_sent();
  s.bytes_received = in.bytes_received();
  s.gpu_memory_gib = in.gpu_memory_gib();
  s.cluster_workers = in.cluster_workers();
  s.communication_time_s = in.communication_time_s();
  s.cluster_steps_per_s = in.cluster_steps_per_s();
  s.accuracy = in.accuracy();
  s.parameter_servers = in.parameter_servers();
  s.cluster = in.cluster();
  s.placement = in.placement();
  s.metrics.insert(in.metrics().begin(), in.metrics().end());
  return s;
}

::spotdnn::v1::Sample ToProto(const profiler::Sample& s) {
  ::spotdnn::v1::Sample out;
  out.set_job_id(s.job_id);
  out.set_worker_id(s.worker_id);
  out.set_instance_type(s.instance_type);
  out.set_gpu_type(s.gpu_type);
  out.set_gpus(s.gpus);
  out.set_batch_size(s.batch_size);
  out.set_step(s.step);
  out.set_wall_time_s(s.wall_time_s);
  out.set_iteration_time_s(s.iteration_time_s);
  out.set_loss(s.loss);
  out.set_bytes_sent(s.bytes_sent);
  out.set_bytes_received(s.bytes_received);
  out.set_gpu_memory_gib(s.gpu_memory_gib);
  out.set_cluster_workers(s.cluster_workers);
  out.set_communication_time_s(s.communication_time_s);
  out.set_cluster_steps_per_s(s.cluster_steps_per_s);
  out.set_accuracy(s.accuracy);
  out.set_parameter_servers(s.parameter_servers);
  out.set_cluster(s.cluster);
  out.set_placement(s.placement);
  out.mutable_metrics()->insert(s.metrics.begin(), s.metrics.end());
  return out;
}

}  // namespace spotdnn::services
