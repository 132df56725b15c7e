// Grouping samples into whole runs (RunsFromSamples) and runs of the same cluster into one
// observation (GroupRuns): the data the cluster fits of cluster_fit.cc are fitted to.
#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "profiler/cluster_fit.h"

namespace spotdnn::profiler {
namespace {

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + mid, v.end());
  double m = v[mid];
  if (v.size() % 2 == 0) m = (m + *std::max_element(v.begin(), v.begin() + mid)) / 2;
  return m;
}

std::string TypeKey(const Sample& s) {
  return s.instance_type.empty() ? s.gpu_type : s.instance_type;
}

}  // namespace

RunSet RunsFromSamples(absl::Span<const Sample> samples) {
  RunSet out;
  // Jobs in order of first appearance; within a job, runs by (composition, servers).
  std::vector<std::string> jobs;
  std::map<std::string, std::map<std::pair<std::string, int>, std::vector<const Sample*>>> grouped;
  std::map<std::string, std::string> why_not;
  for (const Sample& s : samples) {
    if (!grouped.count(s.job_id) && !why_not.count(s.job_id)) jobs.push_back(s.job_id);
    std::string composition = s.cluster;
    if (composition.empty()) {
      const std::string key = TypeKey(s);
      if (key.empty()) {
        why_not.emplace(s.job_id,
                        "its samples name no instance_type or gpu_type (import it with "
                        "--instance-type or --gpu-type)");
        continue;
      }
      composition = absl::StrCat(key, "=", std::max(1, s.cluster_workers));
    }
    grouped[s.job_id][{composition, std::max(1, s.parameter_servers)}].push_back(&s);
    // What each type key is.
    const std::string key = TypeKey(s);
    if (!key.empty()) {
      TypeInfo& info = out.types[key];
      if (!s.instance_type.empty()) info.instance_type = s.instance_type;
      if (!s.gpu_type.empty() && info.gpu_type.empty()) info.gpu_type = s.gpu_type;
      if (s.gpus > 0) info.gpus = s.gpus;
    }
  }
  // Batch per GPU of each type: the median of what its samples say.
  std::map<std::string, std::vector<double>> batches;
  for (const Sample& s : samples) {
    if (s.batch_size > 0 && !TypeKey(s).empty()) {
      batches[TypeKey(s)].push_back(double(s.batch_size) / std::max(1, s.gpus));
    }
  }
  for (auto& [key, b] : batches) out.types[key].batch_per_gpu = static_cast<int>(Median(b));
  for (auto& [key, info] : out.types) {
    if (info.gpu_type.empty() && info.instance_type.empty()) info.gpu_type = key;
    if (info.gpu_type.empty()) info.gpu_type = key;
  }

  auto leave_out = [&](const std::string& job, std::string reason) {
    out.notes.push_back(absl::StrCat("job ", job, " left out: ", reason));
    out.left_out.push_back({job, std::move(reason)});
  };
  for (const std::string& job : jobs) {
    if (!grouped.count(job)) {
      leave_out(job, why_not[job]);
      continue;
    }
    for (const auto& [config, members] : grouped[job]) {
      auto composition = ParseComposition(config.first);
      if (!composition.ok()) {
        leave_out(job, std::string(composition.status().message()));
        continue;
      }
      ClusterRun run;
      run.job_id = job;
      run.composition = *composition;
      run.parameter_servers = config.second;
      for (const auto& [type, n] : run.composition) {
        if (!out.types.count(type)) out.types[type].gpu_type = type;
      }
      // (a) Per-worker iteration times: each type's median, times its workers.
      std::map<std::string, std::vector<double>> times;
      for (const Sample* s : members) {
        if (s->iteration_time_s <= 0) continue;
        std::string key = TypeKey(*s);
        if (key.empty() && run.composition.size() == 1) key = run.composition.begin()->first;
        times[key].push_back(s->iteration_time_s);
      }
      double speed = 0;
      bool complete = !times.empty();
      for (const auto& [type, n] : run.composition) {
        auto it = times.find(type);
        if (it == times.end()) {
          complete = false;
          break;
        }
        speed += n / Median(it->second);
      }
      if (!complete) speed = 0;
      // (b) Cluster-level checkpoints: global steps over wall time. A step that does not
      // increase starts a new segment (a restart, or another run imported under the same job);
      // each segment of two or more checkpoints is a run of its own.
      if (speed == 0) {
        std::vector<const Sample*> points;
        for (const Sample* s : members) {
          if (s->worker_id.empty() && s->wall_time_s > 0) points.push_back(s);
        }
        std::stable_sort(points.begin(), points.end(), [](const Sample* a, const Sample* b) {
          return a->wall_time_s < b->wall_time_s;
        });
        std::vector<ClusterRun> segments;
        size_t start = 0;
        for (size_t i = 1; i <= points.size(); ++i) {
          if (i < points.size() && points[i]->step > points[i - 1]->step) continue;
          const double steps = double(points[i - 1]->step - points[start]->step);
          const double span = points[i - 1]->wall_time_s - points[start]->wall_time_s;
          if (steps > 0 && span > 0) {
            ClusterRun segment = run;
            segment.steps_per_s = steps / span;
            segment.steps = steps;
            segment.duration_s = span;
            segments.push_back(std::move(segment));
          }
          start = i;
        }
        if (!segments.empty()) {
          for (ClusterRun& segment : segments) out.runs.push_back(std::move(segment));
          continue;
        }
      }
      // (c) The speeds the log gave.
      if (speed == 0) {
        std::vector<double> v;
        for (const Sample* s : members) {
          if (s->cluster_steps_per_s > 0) v.push_back(s->cluster_steps_per_s);
        }
        speed = Median(v);
      }
      if (!(speed > 0) || !std::isfinite(speed)) {
        leave_out(absl::StrCat(job, " (", config.first, ")"),
                  "no speed (no iteration times, no two checkpoints with steps and wall times, "
                  "no cluster_steps_per_s)");
        continue;
      }
      run.steps_per_s = speed;
      out.runs.push_back(std::move(run));
    }
  }
  return out;
}

std::string RunSet::LeftOutSummary() const {
  if (left_out.empty()) return "";
  // Reasons in order of first appearance, each with its count and first job.
  std::vector<std::string> order;
  std::map<std::string, std::pair<int, std::string>> by_reason;
  for (const LeftOutJob& j : left_out) {
    auto [it, fresh] = by_reason.try_emplace(j.reason, 0, j.job);
    if (fresh) order.push_back(j.reason);
    ++it->second.first;
  }
  std::vector<std::string> parts;
  for (const std::string& reason : order) {
    const auto& [count, first] = by_reason[reason];
    parts.push_back(absl::StrFormat("%d because %s (the first: %s)", count, reason, first));
  }
  return absl::StrFormat("%d %s left out: %s", left_out.size(),
                         left_out.size() == 1 ? "job" : "jobs", absl::StrJoin(parts, "; "));
}

std::string ClusterObservation::Describe() const {
  return absl::StrCat(CompositionText(composition), ", ", parameter_servers, " PS");
}

std::vector<ClusterObservation> GroupRuns(absl::Span<const ClusterRun> runs) {
  std::map<std::pair<std::map<std::string, int>, int>, std::vector<const ClusterRun*>> grouped;
  for (const ClusterRun& r : runs) grouped[{r.composition, r.parameter_servers}].push_back(&r);
  std::vector<ClusterObservation> out;
  for (const auto& [key, members] : grouped) {
    ClusterObservation o;
    o.composition = key.first;
    o.parameter_servers = key.second;
    o.runs = static_cast<int>(members.size());
    std::vector<double> speeds, steps, durations;
    for (const ClusterRun* r : members) {
      speeds.push_back(r->steps_per_s);
      if (r->steps > 0 && r->duration_s > 0) {
        steps.push_back(r->steps);
        durations.push_back(r->duration_s);
      }
    }
    o.steps_per_s = Median(speeds);
    o.steps = Median(steps);
    o.duration_s = Median(durations);
    out.push_back(std::move(o));
  }
  return out;
}

}  // namespace spotdnn::profiler
