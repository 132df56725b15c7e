// Internal to the job controller: one job being run. Its methods are split by concern:
// job_run.cc (the loop, progress, instances' ends, finish; the rules that end the loop are
// stop_rules.h's), job_launch.cc (the plan's launch and
// the capacity re-plan rounds), job_takeover.cc (revocation events and takeovers), job_deadline.cc
// (the deadline guard: on-demand while spot is short, back to spot when it returns).
#ifndef SPOTDNN_SERVICES_GATEWAY_JOB_JOB_RUN_H_
#define SPOTDNN_SERVICES_GATEWAY_JOB_JOB_RUN_H_

#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "google/protobuf/message.h"
#include "provisioner/launcher/cluster_launcher.h"
#include "services/gateway/job/convergence_watch.h"
#include "services/gateway/job/job_controller.h"
#include "services/gateway/job/job_outlook.h"
#include "services/gateway/job/rendezvous.h"
#include "services/gateway/job/stop_rules.h"

namespace spotdnn::job {

// A message as protobuf JSON (field names as in the .proto), for the job store.
std::string ToStoredJson(const google::protobuf::Message& message);
// A message from the job store's JSON; DATA_LOSS naming `what` when it cannot be read.
absl::Status FromStoredJson(const std::string& json, absl::string_view what,
                            google::protobuf::Message* message);

// The job spec's SLO and plan options as the provisioner takes them.
pb::Slo SloOf(const JobSpec& spec);
pb::PlanOptions OptionsOf(const JobSpec& spec);
// "p2.xlarge=2,g3.8xlarge=1" parts of a cluster (types with a count).
std::vector<TypeCount> CountsOf(const pb::Cluster& cluster);

// The workers a re-plan's cluster has: its prediction's count, else the survivors and what it
// launches.
int WorkersAfter(const pb::Plan& plan, const std::map<std::string, int>& survivors);

// The job's profiling step: imports its logs and makes its short runs (each launched on the
// job's provider as its own job, JOB-profiling-K, until every worker has done its steps), then
// fits the profile the spec names from all of their samples.
// `account` gets its time and its instances' cost as it goes (emitted with each run's progress).
struct ProfilingAccount {
  absl::Time started;
  double seconds = 0;
  double cost_usd = 0;
};
absl::Status Profile(const JobSpec& spec, const pb::InstanceCatalog& catalog,
                     const services::DataRegistry& local, const JobServices& services,
                     const JobOptions& options, base::Clock& clock,
                     const std::function<void(ProfilingEvent)>& emit, ProfilingAccount& account);

// The environment every instance of `job_id` gets beyond the launcher's: where to report
// (SPOTDNN_PROFILER, SPOTDNN_DETECTOR), the cluster's size (SPOTDNN_WORKERS) and where parameter
// servers checkpoint (SPOTDNN_CHECKPOINT_DIR, and SPOTDNN_CHECKPOINT_URI on a cloud: the folder of
// `region` when the spec keeps one per region).
std::map<std::string, std::string> JobEnvironment(const std::string& job_id, const JobSpec& spec,
                                                  const JobOptions& options,
                                                  const launcher::CloudProvider& provider,
                                                  int workers, const std::string& region);

class JobRun {
 public:
  JobRun(JobRecord record, JobSpec spec, const JobServices& services, const JobOptions& options,
         const JobEventSink& sink, base::Clock& clock, const std::atomic<bool>& detach)
      : job_(std::move(record)),
        spec_(std::move(spec)),
        services_(services),
        options_(options),
        sink_(sink),
        clock_(clock),
        detach_(detach) {}

  // Runs the job until it ends; its final record.
  absl::StatusOr<JobRecord> Run();

 private:
  // ---- job_run.cc
  absl::Status Load();
  absl::Status Save() { return services_.store->UpdateJob(job_); }
  absl::Status Log(absl::string_view kind, const std::string& detail);
  int64_t NowMs() { return absl::ToUnixMillis(clock_.Now()); }
  template <typename E>
  void Emit(E what) {
    if (sink_) sink_(JobEvent{.at = clock_.Now(), .job_id = job_.id, .what = std::move(what)});
  }
  // Registers the instances still running with the detector again (a resumed gateway, a
  // detector whose log restarted); failures are warnings.
  void RegisterRunning();
  absl::Status Loop();
  absl::Status PollProgress();
  absl::Status PollInstances();
  // `instance`'s command ended by itself (`end`, from the provider or the instance's agent): the
  // job's own business (done, or failed), not a revocation. Logged as "exited"; the detector
  // forgets it, so that its silence is not reported as a loss; a worker's end is the job's last
  // exit (what a failed job shows).
  absl::Status OnCommandEnd(const InstanceRecord& instance, const launcher::CommandEnd& end);
  absl::Status ShowProgress();
  // Where the job is heading from its measurements so far (job_outlook.h).
  Outlook CurrentOutlook();
  // What the job's instances have cost so far.
  double CostSoFar();
  absl::Status Finish();
  absl::Status Fail(const std::string& why);
  // Workers on record that have not ended, per type.
  std::map<std::string, int> LiveWorkers() const;
  // Workers of `type` on record that have not ended.
  int WorkersOf(const std::string& type) const;
  // Whether a parameter-server restore is under way among `revocations`: a server's notice whose
  // relaunched workers have not reported yet.
  bool Restoring(const std::vector<RevocationRecord>& revocations) const;
  // Revocations of this job; marks `ended_ms` of those of `instance_id` not yet ended.
  absl::Status EndRevocationsOf(const std::string& instance_id, int64_t ended_ms);

  // ---- job_launch.cc
  absl::Status LaunchPlanned();
  // Launches `launch` (type, count) as workers from `first_index` with client tokens
  // ClientTokenFor(token_prefix + TYPE), parameter servers first when `with_servers`; records and
  // registers what started. Types in `skip` (a replayed round the cloud had no capacity for) keep
  // their indexes but are not launched.
  absl::StatusOr<launcher::ClusterLaunchResult> Launch(
      const std::vector<TypeCount>& launch, int first_index, const std::string& token_prefix,
      const pb::Prediction& prediction, LaunchReason reason, bool with_servers,
      const std::set<std::string>& skip = {}, launcher::Market market = launcher::Market::kSpot);
  absl::Status Record(const launcher::Instance& instance, LaunchReason reason,
                      const std::string& token, double iteration_s);
  absl::Status Register(const InstanceRecord& instance);
  // Asks the provisioner to re-plan the rest of the job: `survivors` (type -> count) stay,
  // `iterations_done` were trained on `before`, and each type of `capped` is held at its count
  // (its quota). `what` names the re-plan in errors.
  absl::StatusOr<pb::ReplanResponse> RequestReplan(const std::map<std::string, int>& survivors,
                                                   const pb::Cluster& before,
                                                   double iterations_done,
                                                   const std::map<std::string, int>& capped,
                                                   const std::string& what,
                                                   const pb::Slo* slo = nullptr);
  // `slo` replaces the spec's SLO when given (the refit's iterations target).
  // `counts` (type -> count) with the job's parameter servers.
  pb::Cluster ClusterOf(const std::map<std::string, int>& counts) const;

  // ---- job_sync.cc (a synchronous job: its rendezvous and its elastic launch)
  // Re-adopts the job's rendezvous (its last "rendezvous" event) when it still runs, else starts
  // it (again on the port on record, which the instances' commands name); logged.
  absl::Status EnsureRendezvous();
  // Stops the job's rendezvous at its end; logged.
  absl::Status StopJobRendezvous();
  // The restarts under way, from the job's log (a resumed job's too).
  absl::Status LoadRestarts();
  // Closes each restart under way whose running instances all step again (CloseSyncRestart):
  // logged as "restarted" and told as a RestartedEvent.
  absl::Status CloseRestarts(const pb::GetJobProgressResponse& progress);
  // The launch of `launch` as an elastic cluster (sync_launch.h) at the job's rendezvous.
  absl::StatusOr<launcher::ClusterLaunchRequest> SyncRequest(const std::vector<TypeCount>& launch,
                                                             int first_index,
                                                             const std::string& token_prefix,
                                                             const pb::Prediction& prediction,
                                                             launcher::Market market, int workers);

  // ---- job_zones.cc (catalogs with zones)
  // The zones to launch `type` in, in the order to try them: where the job runs now (the type's
  // running workers; a synchronous job: any running instance's zone), else where the plan put it;
  // then the type's other allowed zones, cheapest first (ties in the catalog's order). A
  // parameter-server job stays in its region. Zones whose move across regions needs more time
  // than the deadline leaves are left out. Empty when the catalog lists no zones for the type.
  std::vector<std::string> ZonesFor(const std::string& type);
  // What a launch of `type` asks the provider to try: ZonesFor's zones that the provider is
  // configured for, those that refused capacity within the last spot probe interval last (still
  // tried: spot is short only when every zone refused). Empty (the provider's own order) when the
  // provider chooses no zones or knows none of them.
  std::vector<std::string> LaunchZones(const std::string& type);
  // Keeps the zones a launch was refused in ("ZONE: why").
  void NoteRefusals(const std::vector<std::string>& refused);
  // The price per hour of `type` in `zone` on `market` (the zone's, else the type's).
  double PriceIn(const std::string& type, const std::string& zone, launcher::Market market);
  // The region of `zone` in the catalog (the catalog's own when the zone does not say).
  std::string RegionOf(const std::string& zone) const;
  // A worker just recorded in a zone other than the last one of its type (of any worker, for a
  // synchronous job): the move is logged ("move", with its cost) and emitted.
  absl::Status NoteMove(const InstanceRecord& launched);
  // The checkpoint's size a move across regions copies (MB).
  double CheckpointMb() const;
  // Seconds the checkpoint's copy to another region takes (the catalog's moves.transfer_mb_per_s,
  // else 100 MB/s).
  double CheckpointCopyS() const;
  // Seconds of training left at the plan's pace with its whole cluster (0 without a prediction).
  double WorkLeftS() const;
  // The region whose checkpoint folder is the job's newest: that of the newest instance launched
  // (its agent uploads there), else the plan's, else the catalog's.
  std::string CheckpointRegion() const;
  // Launches `request`; with a checkpoint folder per region (CheckpointsPerRegion), one region at
  // a time in the order of the zones it tries, the next only when the last had no capacity for
  // any of it.
  absl::StatusOr<launcher::ClusterLaunchResult> LaunchInRegions(
      const launcher::ClusterLaunchRequest& request);
  // Keeps `request` to region `to`'s zones, points its instances at that region's checkpoint
  // folder, and copies the checkpoint there first when the newest is elsewhere (logged
  // "checkpoint_copy").
  absl::Status PlaceCheckpoint(launcher::ClusterLaunchRequest& request, const std::string& to);

  // ---- job_zone_return.cc
  // Each check interval: a parameter-server job's worker type running on spot in one zone moves to
  // a cheaper allowed zone when the zone rule the simulator uses (ChooseSpotZone) says the saving
  // over the work left pays for the move; a zone tried is tried again after a probe interval. The
  // decision is logged before it is carried out ("zone-return"), and a resumed gateway finishes
  // one it did not ("zone-return-done" missing), with the same client tokens.
  absl::Status ZoneReturnTick();
  // Launches `count` spot workers of `type` in zone `to` only; those that land there replace as
  // many of its workers in `from` (stopped).
  absl::Status CarryOutZoneReturn(int number, const std::string& type, const std::string& from,
                                  const std::string& to, int count, int first_index);
  // Rebuilds the count of zone returns from the log and finishes those a stopped gateway did not.
  absl::Status ResumeZoneReturns();
  // Stops running workers `ids` of `type` the job no longer needs (not a revocation): ended on
  // record, no longer watched, logged "ended" with `why`.
  absl::Status StopWorkers(const std::vector<std::string>& ids, const std::string& type,
                           const std::string& why);

  // ---- job_deadline.cc
  // Makes the deadline guard when the job falls back to on-demand (spec fallback "on-demand" and a
  // deadline) and rebuilds it from the job's log: its spot-short and spot-back events, and the
  // launches of decisions a killed gateway logged but did not finish (re-issued with their client
  // tokens, so nothing is launched twice).
  absl::Status StartGuard();
  // Asks the guard (each tick) and carries out its decisions.
  absl::Status GuardTick();
  // True when the guard takes `type` on (it has an on-demand price) once spot is short.
  bool GuardHandles(const std::string& type) const;
  // Spot is short for `type` (wanted workers; spot ones running): logged, then told the guard.
  absl::Status SpotShort(const std::string& type, int wanted);
  // Carries out decision `number` (logged before): spot first, then on-demand, then the stops.
  // `probe`: the spot launch probes capacity (its refusal is said as such).
  absl::Status CarryOut(int number, const std::string& type, int launch_spot, int launch_on_demand,
                        int stop_on_demand, int first_index, bool probe = false);
  // Running workers of `type` on `market`.
  int RunningOn(const std::string& type, launcher::Market market) const;
  // ---- job_refit.cc (the job's one forecast, convergence_watch.h)
  // Starts the watch of a loss target from the model the plan was made with (none without one),
  // fed the measurements so far; logs the first forecast of a job that has none (and says so when
  // it differs from the plan's iterations).
  absl::Status StartWatch();
  // Feeds the latest measurement (none during a parameter-server restore); on a refit adopts the
  // forecast, and re-plans a larger cluster when the predicted finish passes the deadline.
  absl::Status WatchConvergence();
  absl::Status RefitReplan(const ConvergenceForecast& forecast);
  // Makes `forecast` the job's current one: its iterations and finish on the job's record, logged
  // (and emitted) when it moved.
  absl::Status AdoptForecast(const ConvergenceForecast& forecast);
  // The current model's forecast for the `workers` of re-plan `plan`, which needs `needed` global
  // steps from the start in the plan's time from now.
  // The job stands at its global steps on the curve of `from_workers` (R `from_r`), the cluster
  // before the change.
  ConvergenceForecast ForecastForPlan(const pb::Plan& plan, int workers, double needed,
                                      int from_workers, double from_r);
  // A re-plan of the rest of the job from the current forecast: the global steps the chosen
  // cluster needs under the current model, as an iterations target (re-asked until they settle:
  // more workers need more steps); where no cluster meets the deadline, the one finishing earliest.
  struct ForecastReplan {
    pb::ReplanResponse replan;
    double needed = 0;        // global steps from the start the re-plan was asked for
    std::string fastest;      // set when the earliest finish was taken (no cluster meets it)
    std::string unreachable;  // set when the model does not reach the target: nothing asked
    int from_workers = 1;     // the cluster the job's steps were made on, and its R
    double from_r = 0;
  };
  absl::StatusOr<ForecastReplan> ReplanFromForecast(const std::map<std::string, int>& survivors,
                                                    const pb::Cluster& before,
                                                    const std::string& what);
  // The deadline the forecast is held to (from the job's start, less the profiling); 0: none.
  double ForecastDeadline() const;
  // Seconds since the job's launch (0 before it).
  double ElapsedS();
  // Global steps a second lately (0: not measured yet).
  double MeasuredSpeed();
  // What the instances running now cost an hour.
  double HourlyCost() const;
  // Logs and emits a warning.
  absl::Status Warn(const std::string& message);

  // ---- job_takeover.cc
  absl::Status HandleFeed();
  absl::Status HandleEvent(const pb::RevocationEvent& event);
  // The instance's agent reported that its command ended by itself: as the provider's own
  // report of it (OnCommandEnd), and the instance is terminated.
  absl::Status HandleExit(InstanceRecord& instance, const pb::RevocationEvent& event);
  // Records that `instance` goes (a notice: `notice`) or went (revoked, or lost without one) for
  // its takeover, and for a synchronous job's worker the restart of every rank; `kind` names the
  // cause ("notice", "lost", ...), the times are the cloud's (0: unknown).
  absl::Status RecordRevocation(InstanceRecord& instance, const std::string& kind, bool notice,
                                int64_t notice_ms, int64_t effective_ms);
  absl::Status HandlePending();
  absl::Status Takeover(RevocationRecord& revocation);
  // A revoked parameter server: once it has ended (its final checkpoint written), a replacement
  // with its index restores the checkpoint, and the workers are relaunched against it.
  absl::Status ServerTakeover(RevocationRecord& revocation);
  // Records a takeover's launch (`ids`, now, `status`) in the revocation, then the job record when
  // `save_job`, logs and emits it.
  absl::Status RecordTakeover(RevocationRecord& revocation, const std::vector<std::string>& ids,
                              RevocationStatus status, bool save_job);
  // The global step of parameter server `index`'s latest checkpoint (0: none).
  absl::StatusOr<double> CheckpointStep(int index);
  // A takeover worker's first report: the revocation it answers is training again.
  absl::Status MarkTakeoverReported(const std::string& worker_id);

  JobRecord job_;
  JobSpec spec_;
  bool sync_ = false;  // a synchronous (all-reduce) job: torchrun under every instance's agent
  // A synchronous job's restarts not yet over (every running instance stepping again).
  std::vector<RestartSummary> open_restarts_;
  std::optional<RendezvousRecord> rendezvous_;  // a synchronous job's, once started or adopted
  // The last worker whose command ended by itself (the provider's command end); its last lines
  // go into the job's failure when no worker is left.
  std::optional<WorkerExit> last_exit_;
  std::set<std::string> exited_;  // instances whose command ended by itself
  const JobServices& services_;
  const JobOptions& options_;
  const JobEventSink& sink_;
  base::Clock& clock_;
  const std::atomic<bool>& detach_;

  pb::WorkloadProfile workload_;
  pb::InstanceCatalog catalog_;
  pb::Plan plan_;  // the current plan (the first one, or the last capacity re-plan's)
  double first_plan_iterations_ = 0;
  std::map<std::string, double> spot_price_;
  std::string ps_type_ = "m5.xlarge";
  double ps_price_ = 0;
  std::map<std::string, InstanceRecord> instances_;  // by id
  std::set<std::string> reported_workers_;
  std::string last_warning_;
  std::unique_ptr<RevocationFeed> feed_;
  std::vector<LossPoint> history_;     // the job's measurements, oldest first (thinned when long)
  double last_shown_iterations_ = -1;  // the last progress shown (never the same line twice)
  std::unique_ptr<DeadlineGuard> guard_;  // null: no fallback (job_deadline.cc)
  int deadline_decisions_ = 0;            // "deadline" events so far (numbers their tokens)
  std::map<std::string, double> on_demand_price_;
  std::map<std::string, absl::Time> refused_zones_;  // zone -> when it last refused capacity
  bool scores_refused_logged_ = false;  // the provider's placement scores failed once (logged)
  int zone_returns_ = 0;                // "zone-return" events so far
  absl::Time next_zone_check_ = absl::InfinitePast();
  std::map<std::string, absl::Time> zone_tried_;  // "TYPE@ZONE" -> when a return last tried it
  // While a zone return launches: the one zone its launch may use (empty: LaunchZones' order).
  std::string only_zone_;
  absl::Time last_shown_at_ = absl::InfinitePast();
  std::unique_ptr<ConvergenceWatch> watch_;  // null: no loss target or no model to refit
  ConvergenceForecast first_forecast_;
  std::optional<ConvergenceForecast> forecast_;         // the job's current forecast
  std::optional<ConvergenceForecast> logged_forecast_;  // the last one in the job log
  double r_weight_ = 0;   // the forecast's R is r_weight_ x the cluster's R of eq. 5
  double cluster_r_ = 0;  // R of the cluster running (the plan's, then each re-plan's)
  // The last re-plan asked because the forecast was late, and whether it helped (launched
  // workers); what it found when it did not, for the stop rule's message.
  struct LateReplan {
    double at_s = 0;
    bool helped = false;
    std::string outcome;
  };
  std::optional<LateReplan> late_replan_;
  // A parameter-server restore is under way (a server's notice until the relaunched workers
  // report): the loss is not the curve's, so nothing is refitted, re-planned or stopped for it.
  bool restoring_ = false;
  absl::Time next_refit_ = absl::InfinitePast();
  int refit_replans_ = 0;
};

}  // namespace spotdnn::job

#endif  // SPOTDNN_SERVICES_GATEWAY_JOB_JOB_RUN_H_
