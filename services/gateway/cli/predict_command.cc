// The predictor's commands: `spotdnn predict` (how long and at what cost a cluster takes to reach
// a target loss, or to train a number of iterations or epochs), `spotdnn catalogs` and
// `spotdnn workloads` (what is known by name).
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "predictor/types.h"
#include "services/clients/service_clients.h"
#include "services/common/convert.h"
#include "services/gateway/cli/cli.h"
#include "services/gateway/cli/command.h"
#include "services/gateway/cli/connection.h"
#include "services/gateway/cli/flag_errors.h"
#include "services/gateway/cli/output.h"
#include "services/gateway/cli/stored_profiles.h"
#include "services/gateway/cli/sync_batch_flags.h"
#include "services/gateway/cli/target_flags.h"
#include "services/predictor/predictor_service.h"

namespace spotdnn::gateway {
namespace {

// The 80% interval rows of a prediction: p10, p50 and p90 of the steps and the time ("no spread"
// when the model gives a point, as eq. 3 and iteration targets do).
void AddIntervalRows(const pb::Prediction& p, Table& summary) {
  const std::string note = p.has_spread() ? "" : " (no spread)";
  summary.AddRow({"iterations (p10 / p50 / p90)",
                  absl::StrCat(Fixed(p.iterations_p10(), 0), " / ", Fixed(p.iterations_p50(), 0),
                               " / ", Fixed(p.iterations_p90(), 0), note)});
  summary.AddRow({"time (p10 / p50 / p90)",
                  absl::StrCat(HumanDuration(p.time_p10_s()), " / ", HumanDuration(p.time_p50_s()),
                               " / ", HumanDuration(p.time_p90_s()), note)});
}

// A synchronous (all-reduce) workload's prediction: one step of the whole cluster.
void PrintAllReducePrediction(const pb::PredictResponse& response, const TargetFlags& target,
                              const std::string& workload, std::ostream& out) {
  const pb::Prediction& p = response.prediction();
  out << "Prediction (synchronous all-reduce): " << workload << " on " << response.catalog()
      << ", target " << target.Describe() << "\n\n";
  Table workers({"instance type", "count", "GPUs", "local batch", "compute (s)", "all-reduce (s)",
                 "step (s)"});
  int ranks = 0;
  for (const pb::WorkerPrediction& w : p.workers()) {
    ranks += w.count() * w.gpus();
    workers.AddRow({w.instance_type(), absl::StrCat(w.count()), absl::StrCat(w.gpus()),
                    LocalBatchText(w.local_batch()), Fixed(w.compute_time_s(), 5),
                    Fixed(w.communication_time_s(), 5), Fixed(w.iteration_time_s(), 5)});
  }
  workers.Print(out);
  out << "\n";
  Table summary({"quantity", "value"});
  summary.AddRow({"instances", absl::StrCat(p.worker_count())});
  summary.AddRow({"ranks (GPUs)", absl::StrCat(ranks)});
  summary.AddRow({"global batch", GlobalBatchText(p)});
  if (p.accumulation_steps() > 1) {
    summary.AddRow(
        {"accumulation steps",
         absl::StrCat(p.accumulation_steps(),
                      " (micro-steps per step: the global batch exceeds the cluster's memory)")});
  }
  summary.AddRow({"step time (s)", Fixed(p.expected_iteration_time_s(), 6)});
  summary.AddRow({"cluster speed (samples/s)", Fixed(p.cluster_speed(), 2)});
  summary.AddRow({"steps", Fixed(p.normalized_iterations(), 0)});
  summary.AddRow(
      {"time T (s)", absl::StrCat(Fixed(p.time_s(), 2), " (", HumanDuration(p.time_s()), ")")});
  if (HasSyncConvergence(p)) {
    // A loss or metric target: the convergence model's interval, and how its steps were carried
    // to this global batch.
    AddIntervalRows(p, summary);
    if (auto row = CriticalBatchRow(p); !row.empty()) summary.AddRow(row);
    if (p.extrapolated()) summary.AddRow(BeyondTheDataRow(p));
  }
  summary.AddRow(
      {"spot cost", absl::StrCat(Dollars(p.cost_usd()), " (", Dollars(p.price_per_hour()), "/h)")});
  summary.AddRow({"on-demand cost", absl::StrCat(Dollars(p.on_demand_cost_usd()), " (",
                                                 Dollars(p.on_demand_price_per_hour()), "/h)")});
  summary.Print(out);
}

void PrintPrediction(const pb::PredictResponse& response, const pb::LossCurveResponse* curve,
                     const TargetFlags& target, const std::string& workload, std::ostream& out) {
  const pb::Prediction& p = response.prediction();
  out << "Prediction: " << workload << " on " << response.catalog() << ", target "
      << target.Describe() << "\n\n";
  Table workers({"instance type", "count", "GPUs", "batch", "T_comp (s)", "T_comm (s)", "T_i (s)",
                 "samples/s"});
  for (const pb::WorkerPrediction& w : p.workers()) {
    // A shared-ps profile may know no batch (iteration targets need none): "-".
    const bool batch = w.batch_size() > 0;
    workers.AddRow({w.instance_type(), absl::StrCat(w.count()), absl::StrCat(w.gpus()),
                    batch ? absl::StrCat(w.batch_size()) : "-", Fixed(w.compute_time_s(), 5),
                    Fixed(w.communication_time_s(), 5), Fixed(w.iteration_time_s(), 5),
                    batch ? Fixed(w.samples_per_s(), 1) : "-"});
  }
  workers.Print(out);
  out << "\n";
  Table summary({"quantity", "value"});
  summary.AddRow({"workers |N|", absl::StrCat(p.worker_count())});
  summary.AddRow({"parameter servers", absl::StrCat(p.parameter_servers())});
  if (p.ps_response_time_s() > 0) {
    summary.AddRow({"parameter-server utilisation W", Fixed(p.ps_utilization(), 4)});
    summary.AddRow({"PS exchange R (s)", Fixed(p.ps_response_time_s(), 5)});
  } else {
    summary.AddRow({"contention probability P", Fixed(p.contention_probability(), 4)});
  }
  summary.AddRow({"worker bandwidth B_wk (MB/s)",
                  p.workers_size() > 0 ? Fixed(p.workers(0).bandwidth_mb_per_s(), 2) : "-"});
  summary.AddRow(
      {"cluster speed v (samples/s)", p.cluster_speed() > 0 ? Fixed(p.cluster_speed(), 2) : "-"});
  summary.AddRow({"iterations/s", Fixed(1 / p.expected_iteration_time_s(), 3)});
  summary.AddRow({"expected iteration T_exp (s)", Fixed(p.expected_iteration_time_s(), 6)});
  summary.AddRow({"WA batch b_w", p.wa_batch() > 0 ? Fixed(p.wa_batch(), 1) : "-"});
  summary.AddRow({"convergence coefficient R", Fixed(p.convergence_coefficient(), 4)});
  summary.AddRow({"normalized iterations j", Fixed(p.normalized_iterations(), 0)});
  summary.AddRow(
      {"time T (s)", absl::StrCat(Fixed(p.time_s(), 2), " (", HumanDuration(p.time_s()), ")")});
  AddIntervalRows(p, summary);
  if (p.extrapolated()) summary.AddRow(BeyondTheDataRow(p));
  summary.AddRow(
      {"spot cost", absl::StrCat(Dollars(p.cost_usd()), " (", Dollars(p.price_per_hour()), "/h)")});
  summary.AddRow({"on-demand cost", absl::StrCat(Dollars(p.on_demand_cost_usd()), " (",
                                                 Dollars(p.on_demand_price_per_hour()), "/h)")});
  if (p.on_demand_cost_usd() > 0) {
    summary.AddRow(
        {"spot saving",
         absl::StrFormat("%.1f%%", 100.0 * (1 - p.cost_usd() / p.on_demand_cost_usd()))});
  }
  summary.Print(out);
  if (curve != nullptr) {
    out << "\nPredicted loss curve\n";
    Table points({"time (s)", "iterations", "loss"});
    for (const pb::LossPoint& pt : curve->points()) {
      points.AddRow(
          {Fixed(pt.time_s(), 1), Fixed(pt.normalized_iterations(), 0), Fixed(pt.loss(), 4)});
    }
    points.Print(out);
  }
}

absl::StatusOr<Connection<pb::Predictor, services::PredictorServiceImpl>> ConnectPredictor(
    const Args& args) {
  return Connect<pb::Predictor, services::PredictorServiceImpl>(args);
}

int ListCommand(const std::string& what, const Args& args, const Io& io) {
  auto connection = ConnectPredictor(args);
  if (!connection.ok()) return ReportError(connection.status(), what, io);
  const clients::PredictorClient predictor(*connection->stub);
  if (what == "catalogs") {
    auto listed = predictor.ListCatalogs();
    if (!listed.ok()) return ReportError(listed.status(), what, io);
    const pb::ListCatalogsResponse& response = *listed;
    if (io.json) {
      io.out << services::ToJson(response) << "\n";
      return kExitOk;
    }
    Table table(
        {"catalog", "provider", "region", "types", "prices as of", "zones", "instance types"});
    table.LeftAlign(1);
    table.LeftAlign(2);
    table.LeftAlign(6);
    table.LeftAlign(7);
    for (const pb::InstanceCatalog& c : response.catalogs()) {
      std::vector<std::string> names, zones, regions;
      for (const pb::InstanceType& t : c.instance_types()) {
        names.push_back(t.name());
        for (const pb::InstanceZone& z : t.zones()) {
          const std::string region = z.region().empty() ? c.region() : z.region();
          if (std::find(zones.begin(), zones.end(), z.name()) == zones.end()) {
            zones.push_back(z.name());
          }
          if (std::find(regions.begin(), regions.end(), region) == regions.end()) {
            regions.push_back(region);
          }
        }
      }
      // How many zones it lists, and in which regions (`spotdnn plan --zone/--region`).
      const std::string where =
          zones.empty() ? "-" : absl::StrCat(zones.size(), " in ", absl::StrJoin(regions, ", "));
      table.AddRow({c.name(), c.provider(), c.region(), absl::StrCat(c.instance_types_size()),
                    c.prices_as_of(), where, absl::StrJoin(names, " ")});
    }
    table.Print(io.out);
    return kExitOk;
  }
  auto listed = predictor.ListWorkloads();
  if (!listed.ok()) return ReportError(listed.status(), what, io);
  pb::ListWorkloadsResponse response = *std::move(listed);
  // The stored profiles too (DATA_DIR/profiles.db, or --profiler): `predict`, `plan` and a job's
  // workload find them by name, ahead of a built-in one of the same name. A stored profile has a
  // version; a built-in one has none.
  const int builtins = response.workloads_size();
  auto profiler = ConnectProfiler(args, "--profiler", /*create=*/false);
  if (!profiler.ok()) return ReportError(profiler.status(), what, io);
  if (profiler->stub != nullptr) {
    auto stored = clients::ProfilerClient(*profiler->stub).ListProfiles();
    if (!stored.ok()) {
      return ReportError(absl::Status(stored.status().code(),
                                      absl::StrCat("the stored profiles (", profiler->where,
                                                   "): ", stored.status().message())),
                         what, io);
    }
    for (const pb::WorkloadProfile& w : stored->profiles()) *response.add_workloads() = w;
  }
  if (io.json) {
    io.out << services::ToJson(response) << "\n";
    return kExitOk;
  }
  Table table({"workload", "dataset", "S_parm (MB)", "B_req (MB/s)", "compute entries",
               "loss model", "variant", "from"});
  table.LeftAlign(1);
  table.LeftAlign(5);
  table.LeftAlign(6);
  table.LeftAlign(7);
  for (int i = 0; i < response.workloads_size(); ++i) {
    const pb::WorkloadProfile& w = response.workloads(i);
    table.AddRow({w.name(), w.dataset(), Fixed(w.parameter_size_mb(), 2),
                  Fixed(w.required_bandwidth_mb_per_s(), 1), absl::StrCat(w.compute_size()),
                  w.has_loss() ? "yes" : "no (fit one first)",
                  services::EnumLabel(w.model_variant()),
                  i < builtins ? "built in" : absl::StrCat("stored, version ", w.version())});
  }
  table.Print(io.out);
  if (response.workloads_size() > builtins) {
    io.out << "Stored profiles: " << profiler->where << " (spotdnn profile list).\n";
  }
  return kExitOk;
}

}  // namespace

int Predict(const Args& args, pb::Predictor::StubInterface& stub,
            const services::DataRegistry& local, const Io& io) {
  // The service names its request's fields; the user typed flags.
  auto fail = [&](const absl::Status& s) {
    return ReportError(NameFlags(s, PredictorFieldFlags()), "predict", io);
  };
  pb::PredictRequest request;
  auto workload = args.Required("--workload");
  if (!workload.ok()) return fail(workload.status());
  auto catalog = args.Required("--catalog");
  if (!catalog.ok()) return fail(catalog.status());
  auto cluster_text = args.Required("--cluster");
  if (!cluster_text.ok()) return fail(cluster_text.status());
  auto target = ParseTargetFlags(args);
  if (!target.ok()) return fail(target.status());
  auto counts = ParseCounts("--cluster", *cluster_text);
  if (!counts.ok()) return fail(counts.status());
  int parameter_servers = 1;
  if (auto ps = args.Get("--parameter-servers")) {
    auto parsed = ParseInt("--parameter-servers", *ps, 1, 1000);
    if (!parsed.ok()) return fail(parsed.status());
    parameter_servers = *parsed;
  }
  if (auto sync = args.Get("--sync")) {
    auto kind = predictor::ParseSyncKind(*sync, "--sync");
    if (!kind.ok()) return fail(kind.status());
    request.set_sync(*kind == predictor::SyncKind::kAllReduce ? pb::SYNC_KIND_ALLREDUCE
                                                              : pb::SYNC_KIND_PS);
  }
  auto batch_flags = ParseSyncBatchFlags(args);
  if (!batch_flags.ok()) return fail(batch_flags.status());
  request.set_local_batch(batch_flags->local_batch);
  request.set_global_batch(batch_flags->global_batch);
  request.set_global_batch_mode(batch_flags->mode);
  int curve_points = 0;
  if (auto c = args.Get("--curve")) {
    auto parsed = ParseInt("--curve", *c, 2, 10000);
    if (!parsed.ok()) return fail(parsed.status());
    curve_points = *parsed;
  }
  std::string described;
  auto workload_ref = ResolveWorkloadArg(args, *workload, local, &described);
  if (!workload_ref.ok()) return fail(workload_ref.status());
  auto catalog_ref = CatalogRefFor(*catalog, local);
  if (!catalog_ref.ok()) return fail(catalog_ref.status());

  *request.mutable_workload() = *workload_ref;
  *request.mutable_catalog() = *catalog_ref;
  target->ApplyTo(&request);
  for (const auto& [type, count] : *counts) {
    pb::InstanceCount* c = request.mutable_cluster()->add_instances();
    c->set_instance_type(type);
    c->set_count(count);
  }
  request.mutable_cluster()->set_parameter_servers(parameter_servers);

  const clients::PredictorClient predictor(stub);
  auto predicted = predictor.Predict(request);
  if (!predicted.ok()) return fail(predicted.status());
  const pb::PredictResponse& response = *predicted;
  pb::LossCurveResponse curve;
  if (curve_points > 0) {
    pb::LossCurveRequest curve_request;
    *curve_request.mutable_workload() = request.workload();
    *curve_request.mutable_catalog() = request.catalog();
    *curve_request.mutable_cluster() = request.cluster();
    target->ApplyTo(&curve_request);
    curve_request.set_points(curve_points);
    auto answered = predictor.LossCurve(curve_request);
    if (!answered.ok()) return fail(answered.status());
    curve = *std::move(answered);
  }

  if (io.json) {
    // One object: the prediction's fields at the top level, plus what it was for. The metric
    // target in the shape every command gives it (MetricTargetJson), not the message's.
    pb::Prediction prediction = response.prediction();
    std::string head = absl::StrCat("{\"workload\":", JsonString(response.workload()),
                                    ",\"catalog\":", JsonString(response.catalog()), ",");
    if (prediction.accumulation_steps() > 0) {
      // A synchronous workload: one step of the whole cluster, and each type's local batch.
      if (request.local_batch() > 0) {
        head += absl::StrCat("\"sync\":\"allreduce\",\"local_batch\":", request.local_batch(), ",");
      } else {
        head += "\"sync\":\"allreduce\",";
      }
      head += absl::StrCat("\"global_batch\":", Fixed(prediction.wa_batch(), 0),
                           ",\"local_batches\":", LocalBatchesJson(prediction),
                           ",\"iteration_time_s\":",
                           absl::StrFormat("%.17g", prediction.expected_iteration_time_s()), ",");
    }
    if (prediction.has_target_metric()) {
      head += absl::StrCat("\"target_metric\":", MetricTargetJson(prediction.target_metric()), ",");
      prediction.clear_target_metric();
    }
    std::string body = services::ToJson(prediction);
    if (curve_points > 0) {
      std::string points = services::ToJson(curve);  // {"points":[...],"expected_...":x}
      head += absl::StrCat("\"loss_curve\":", points, ",");
    }
    io.out << head << body.substr(1) << "\n";
  } else if (response.prediction().accumulation_steps() > 0) {
    PrintAllReducePrediction(response, *target,
                             described == *workload ? response.workload() : described, io.out);
  } else {
    PrintPrediction(response, curve_points > 0 ? &curve : nullptr, *target,
                    described == *workload ? response.workload() : described, io.out);
  }
  return kExitOk;
}

std::vector<Command> ModelCommands() {
  return {
      {.name = "predict",
       .summary = "time and cost for a cluster to reach a target loss, iterations or epochs",
       .synopsis = "--workload W --catalog C --cluster TYPE=N[,TYPE=N...]\n"
                   "(--loss L | --accuracy A | --target METRIC>=V|METRIC<=V | --iterations N |\n"
                   " --epochs E --dataset-size S)\n"
                   "[--parameter-servers N] [--curve POINTS] [--sync allreduce|ps]\n"
                   "[--local-batch B | --global-batch B|scale|fixed] [--json]\n"
                   "[--server HOST:PORT]\n"
                   "[--data-dir D | --profiler H:P]",
       .description =
           "Predicts per-type iteration time, cluster speed, WA batch, convergence "
           "coefficient, normalized\niterations, time and spot/on-demand cost for the "
           "cluster to reach loss L (or accuracy A, or any\nmetric's value), or to train "
           "N global iterations, or E epochs of S samples. A target a\nconvergence model "
           "predicts comes with an 80% interval: iterations_p10/p50/p90 and\n"
           "time_p10_s/p50_s/p90_s (global steps, seconds; all three equal without a "
           "spread).",
       .flags =
           {{"--workload", "W",
             "a stored profile's name (spotdnn profile list), a built-in one (spotdnn\n"
             "workloads) or a JSON file"},
            {"--catalog", "C", "built-in catalog name (see `spotdnn catalogs`) or a JSON file"},
            {"--cluster", "TYPE=N,...", "workers per instance type"},
            MetricTargetFlagHelp()[0],
            MetricTargetFlagHelp()[1],
            MetricTargetFlagHelp()[2],
            {"--iterations", "N",
             "instead: train N global iterations (every worker step counts one)"},
            {"--epochs", "E", "instead: train E passes over a dataset of ..."},
            {"--dataset-size", "S", "... S samples (iterations = E S / the cluster's WA batch)"},
            {"--parameter-servers", "N", "parameter servers (their bandwidth adds up); default 1"},
            {"--curve", "POINTS", "also print the predicted loss curve up to the target"},
            {"--sync", "allreduce|ps",
             "how the workload trains (default: the profile's): synchronous all-reduce\n"
             "(the profile's all-reduce model) or parameter server"},
            {"--local-batch", "B",
             "all-reduce: samples per GPU per step, every rank the same (the even split)"},
            {"--global-batch", "B|scale|fixed",
             "all-reduce: samples per step over every rank, split by speed within each\n"
             "GPU's memory (default: the profile's global_batch_size); one of the two\n"
             "is needed. `scale`: the global batch follows the cluster, every rank at\n"
             "--local-batch (default: the profile's local_batch_size), and a loss or\n"
             "metric target's steps follow the critical-batch law; `fixed`: the\n"
             "profile's global_batch_size (default: the profile's global_batch)"},
            ServerFlag("spotdnn-predictor"),
            DataDirFlag(),
            {"--profiler", "H:P",
             "a running spotdnn-profiler whose stored profiles --workload may name\n"
             "(default: DATA_DIR/profiles.db)"}},
       .footer = "Exit status: 0 ok, 2 bad input (the message names the field), 1 service "
                 "failure.",
       .run =
           [](const Args& args, const Io& io) {
             auto connection = ConnectPredictor(args);
             if (!connection.ok()) return ReportError(connection.status(), "predict", io);
             return Predict(args, *connection->stub, services::DataRegistry::WithBuiltins(), io);
           }},
      {.name = "catalogs",
       .summary = "the instance catalogs known by name",
       .synopsis = "[--json] [--server HOST:PORT]",
       .flags = {ServerFlag("spotdnn-predictor")},
       .run = [](const Args& args, const Io& io) { return ListCommand("catalogs", args, io); }},
      {.name = "workloads",
       .summary = "the workload profiles known by name: built in, and stored",
       .synopsis = "[--json] [--server HOST:PORT] [--data-dir D | --profiler H:P]",
       .description = "The built-in profiles, then the stored ones (the latest version of each): "
                      "every name\n`predict`, `plan`, `simulate` and a job's workload accept.",
       .flags = {ServerFlag("spotdnn-predictor"),
                 DataDirFlag(),
                 {"--profiler", "H:P",
                  "a running spotdnn-profiler whose stored profiles to list too\n"
                  "(default: DATA_DIR/profiles.db)"}},
       .run = [](const Args& args, const Io& io) { return ListCommand("workloads", args, io); }},
  };
}

}  // namespace spotdnn::gateway
