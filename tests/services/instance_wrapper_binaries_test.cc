// spotdnn-agent as the instance wrapper, as a provider runs it: the real spotdnn-profiler and
// spotdnn-metadata-emulator as processes on 127.0.0.1, the fake S3 in this process, and plain
// shell scripts as the training command. Figures (times) are printed, not asserted.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "services/common/security.h"
#include "spotdnn/v1/profiler.grpc.pb.h"
#include "tests/launcher/fake_s3.h"
#include "tests/testing/child_process.h"
#include "tests/testing/ports.h"

extern char** environ;

namespace spotdnn::services {
namespace {

namespace fs = std::filesystem;
using ::spotdnn::testing_util::Child;
using ::spotdnn::testing_util::FreeLoopbackPort;
using ::spotdnn::testing_util::ReadPort;
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

const std::string kBin = SPOTDNN_BINARY_DIR;

int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Running (a zombie waiting for its new parent to reap it counts as gone).
bool Alive(pid_t pid) {
  if (kill(pid, 0) != 0) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string content((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t paren = content.rfind(')');
  return paren == std::string::npos || paren + 2 >= content.size() || content[paren + 2] != 'Z';
}

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::string Slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A process started with execve and extra environment variables (built before the fork: this
// test process has threads), its stdout and stderr to `output_file`.
class Process {
 public:
  Process(std::vector<std::string> argv, const std::vector<std::string>& extra_env,
          const std::string& output_file) {
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
    env.insert(env.end(), extra_env.begin(), extra_env.end());
    std::vector<char*> args, envp;
    for (std::string& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    for (std::string& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    const int fd = open(output_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    pid_ = fork();
    if (pid_ == 0) {
      dup2(fd, 1);
      dup2(fd, 2);
      execve(args[0], args.data(), envp.data());
      _exit(127);
    }
    close(fd);
  }
  ~Process() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  pid_t pid() const { return pid_; }
  // The exit status (128 + signal when killed) once it exits within `timeout`.
  std::optional<int> Wait(std::chrono::milliseconds timeout) {
    const auto until = Clock::now() + timeout;
    while (pid_ > 0) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      if (Clock::now() > until) return std::nullopt;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return std::nullopt;
  }

 private:
  pid_t pid_ = -1;
};

class InstanceWrapperBinaries : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("instance_wrapper_binaries_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  void StartEmulator() {
    emulator_ = std::make_unique<Child>(std::vector<std::string>{
        kBin + "/spotdnn-metadata-emulator", "--port_file=" + Path("emu.port"), "--threads=16"});
    emulator_port_ = ReadPort(Path("emu.port"));
    ASSERT_GT(emulator_port_, 0);
  }
  std::string Endpoint(const std::string& instance) const {
    return absl::StrCat("http://127.0.0.1:", emulator_port_, "/i/", instance);
  }
  // The profiler on 127.0.0.1:`port` (fixed, so that a restarted one is found again).
  std::unique_ptr<Child> StartProfiler(int port) {
    fs::remove(Path("profiler.port"));
    auto p = std::make_unique<Child>(
        std::vector<std::string>{
            kBin + "/spotdnn-profiler", absl::StrCat("--listen=127.0.0.1:", port),
            "--port_file=" + Path("profiler.port"), "--db=" + Path("profiles.db")},
        Path("profiler.log"));
    EXPECT_EQ(ReadPort(Path("profiler.port")), port);
    return p;
  }
  v1::GetJobProgressResponse Progress(int port, const std::string& job) {
    auto stub = v1::Profiler::NewStub(MakeChannel(absl::StrCat("127.0.0.1:", port)));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::GetJobProgressRequest request;
    request.set_job_id(job);
    v1::GetJobProgressResponse response;
    const grpc::Status s = stub->GetJobProgress(&context, request, &response);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return response;
  }
  // The agent's flags for an instance with the emulator's endpoint.
  std::vector<std::string> Agent(const std::string& instance, const std::string& job,
                                 std::vector<std::string> more) {
    std::vector<std::string> argv = {kBin + "/spotdnn-agent",
                                     "--cloud=aws",
                                     "--instance_id=" + instance,
                                     "--job_id=" + job,
                                     "--metadata_endpoint=" + Endpoint(instance),
                                     "--poll_interval=100ms",
                                     "--notice_file=" + Path(instance + ".notice.json"),
                                     "--spool=" + Path(instance + ".spool")};
    argv.insert(argv.end(), more.begin(), more.end());
    return argv;
  }
  // Waits until `file` contains `text` (up to `timeout`).
  bool WaitForText(const std::string& file, const std::string& text,
                   std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
    const auto until = Clock::now() + timeout;
    while (Clock::now() < until) {
      if (absl::StrContains(Slurp(file), text)) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

  fs::path dir_;
  std::unique_ptr<Child> emulator_;
  int emulator_port_ = 0;
};

// A plain script that only prints SPOTDNN_SAMPLE lines, under the wrapper, with
// the profiler stopped for 5 s mid-run: every sample arrives, none is stored twice.
TEST_F(InstanceWrapperBinaries, SamplesReachTheProfilerThroughAFiveSecondOutage) {
  StartEmulator();
  const int port = FreeLoopbackPort();
  ASSERT_GT(port, 0);
  auto profiler = StartProfiler(port);
  const std::string script =
      "i=1; while [ $i -le 80 ]; do "
      "echo \"SPOTDNN_SAMPLE step=$i iteration_time_s=0.1 loss=$((200 - i))\"; "
      "echo \"log line $i\"; i=$((i + 1)); sleep 0.1; done; "
      "echo 'SPOTDNN_SAMPLE step=oops'";
  const auto start = Clock::now();
  Process agent(Agent("i-samples", "job-outage",
                      {absl::StrCat("--profiler=127.0.0.1:", port), "--", "/bin/sh", "-c", script}),
                {}, Path("agent.log"));
  // Some samples stored, then the profiler goes away for 5 s.
  int64_t before_stop = 0;
  for (int i = 0; i < 400 && before_stop < 5; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
    const auto p = Progress(port, "job-outage");
    before_stop = p.total_steps();
  }
  ASSERT_GE(before_stop, 5);
  ASSERT_TRUE(profiler->Stop());
  const auto stopped = Clock::now();
  std::this_thread::sleep_for(std::chrono::seconds(5));
  profiler = StartProfiler(port);
  const auto restarted = Clock::now();
  // When the first sample spooled during the outage is stored (printed, not asserted).
  double catch_up_s = -1;
  for (int i = 0; i < 800; ++i) {
    if (Progress(port, "job-outage").total_steps() > before_stop) {
      catch_up_s = SecondsSince(restarted);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }

  const std::optional<int> status = agent.Wait(std::chrono::seconds(60));
  ASSERT_TRUE(status.has_value()) << Slurp(Path("agent.log"));
  EXPECT_EQ(*status, 0) << Slurp(Path("agent.log"));
  const double total_s = SecondsSince(start);
  const double after_restart_s = SecondsSince(restarted);

  const v1::GetJobProgressResponse progress = Progress(port, "job-outage");
  ASSERT_EQ(progress.workers_size(), 1);
  EXPECT_EQ(progress.workers(0).worker_id(), "i-samples");
  EXPECT_EQ(progress.workers(0).steps(), 80);
  EXPECT_EQ(progress.workers(0).samples(), 80);  // none lost, none stored twice
  EXPECT_EQ(progress.total_steps(), 80);
  const std::string log = Slurp(Path("agent.log"));
  EXPECT_THAT(log, HasSubstr("log line 80\n"));  // the instance log
  EXPECT_THAT(log, HasSubstr("1 malformed"));
  EXPECT_THAT(log, HasSubstr("line 161: step = \"oops\""));
  EXPECT_THAT(log, HasSubstr("80 acknowledged"));
  std::cout << "[measured] outage test: " << before_stop << " steps stored before the stop, "
            << "profiler down " << std::chrono::duration<double>(restarted - stopped).count()
            << " s, spooled samples stored " << catch_up_s
            << " s after its restart (backoff 200 ms doubling), agent ran " << total_s
            << " s in all and exited " << after_restart_s << " s after the profiler restarted"
            << std::endl;
}

// Lines the profiler could not take (strings that are not UTF-8) are refused at the
// agent, counted and logged, and never poison a batch: every valid step after them arrives, at
// once (not after --flush_timeout).
TEST_F(InstanceWrapperBinaries, AnInvalidLineCostsNoValidSample) {
  StartEmulator();
  const int port = FreeLoopbackPort();
  ASSERT_GT(port, 0);
  auto profiler = StartProfiler(port);
  const std::string script =
      "printf 'SPOTDNN_SAMPLE step=1 iteration_time_s=0.1\\n'; "
      "printf 'SPOTDNN_SAMPLE step=2 iteration_time_s=0.1 instance_type=\\303\\050\\n'; "
      "printf 'SPOTDNN_SAMPLE step=2 iteration_time_s=0.1\\n'; "
      "printf 'SPOTDNN_SAMPLE step=3 iteration_time_s=0.1 worker_id=w\\377\\376\\n'; "
      "printf 'SPOTDNN_SAMPLE step=3 iteration_time_s=0.1\\n'";
  const auto start = Clock::now();
  Process agent(Agent("i-utf8", "job-utf8",
                      {absl::StrCat("--profiler=127.0.0.1:", port), "--flush_timeout=20s", "--",
                       "/bin/sh", "-c", script}),
                {}, Path("agent.log"));
  const std::optional<int> status = agent.Wait(std::chrono::seconds(60));
  ASSERT_TRUE(status.has_value()) << Slurp(Path("agent.log"));
  EXPECT_EQ(*status, 0) << Slurp(Path("agent.log"));
  const double took_s = SecondsSince(start);
  const v1::GetJobProgressResponse progress = Progress(port, "job-utf8");
  ASSERT_EQ(progress.workers_size(), 1) << Slurp(Path("agent.log"));
  EXPECT_EQ(progress.workers(0).worker_id(), "i-utf8");
  EXPECT_EQ(progress.workers(0).steps(), 3);
  EXPECT_EQ(progress.workers(0).samples(), 3);  // steps 1, 2 and 3: none lost
  const std::string log = Slurp(Path("agent.log"));
  EXPECT_THAT(log, HasSubstr("2 malformed"));
  EXPECT_THAT(log, HasSubstr("instance_type = "));
  EXPECT_THAT(log, HasSubstr("not valid UTF-8"));
  EXPECT_THAT(log, HasSubstr("3 acknowledged"));
  EXPECT_THAT(log, ::testing::Not(HasSubstr("already reported")));
  // No batch was refused and retried until the flush timeout.
  EXPECT_THAT(log, ::testing::Not(HasSubstr("did not take")));
  std::cout << "[measured] agent with 2 invalid lines exited after " << took_s << " s" << std::endl;
}

// The spool outlives the agent: samples the profiler never took are sent by the next agent on
// the instance, and a step already queued before the restart is not queued again.
TEST_F(InstanceWrapperBinaries, TheSpoolCarriesSamplesAcrossAnAgentRestart) {
  StartEmulator();
  const int port = FreeLoopbackPort();
  ASSERT_GT(port, 0);
  const std::string profiler_flag = absl::StrCat("--profiler=127.0.0.1:", port);
  {
    Process first(Agent("i-spool", "job-spool",
                        {profiler_flag, "--flush_timeout=300ms", "--", "/bin/sh", "-c",
                         "for i in $(seq 1 20); do echo \"SPOTDNN_SAMPLE step=$i "
                         "iteration_time_s=0.2\"; done"}),
                  {}, Path("first.log"));
    const auto status = first.Wait(std::chrono::seconds(30));
    ASSERT_TRUE(status.has_value());
    EXPECT_EQ(*status, 0) << Slurp(Path("first.log"));
  }
  EXPECT_THAT(Slurp(Path("first.log")), HasSubstr("20 left in the spool"));
  auto profiler = StartProfiler(port);
  Process second(Agent("i-spool", "job-spool",
                       {profiler_flag, "--", "/bin/sh", "-c",
                        "for i in $(seq 20 25); do echo \"SPOTDNN_SAMPLE step=$i "
                        "iteration_time_s=0.2\"; done"}),
                 {}, Path("second.log"));
  const auto status = second.Wait(std::chrono::seconds(30));
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(*status, 0) << Slurp(Path("second.log"));
  const std::string log = Slurp(Path("second.log"));
  EXPECT_THAT(log, HasSubstr("20 samples not yet acknowledged restored"));
  EXPECT_THAT(log, HasSubstr("1 duplicates"));
  const v1::GetJobProgressResponse progress = Progress(port, "job-spool");
  ASSERT_EQ(progress.workers_size(), 1);
  EXPECT_EQ(progress.workers(0).steps(), 25);
  EXPECT_EQ(progress.workers(0).samples(), 25);
}

// The training process receives the notice signal and finds the notice file
// before the instance is stopped.
TEST_F(InstanceWrapperBinaries, TheCommandGetsTheNoticeFileAndSignalBeforeTheDeadline) {
  StartEmulator();
  const std::string seen = Path("seen.json");
  const std::string seen_at = Path("seen_at");
  const std::string script = absl::StrCat(
      "trap 'cat \"$SPOTDNN_NOTICE_FILE\" > ", seen, "; date +%s%3N > ", seen_at,
      "; echo checkpointed; exit 0' TERM; echo ready; while true; do sleep 0.05; done");
  Process agent(Agent("i-notice", "job-notice", {"--profiler=none", "--", "/bin/sh", "-c", script}),
                {}, Path("agent.log"));
  ASSERT_TRUE(WaitForText(Path("agent.log"), "ready\n")) << Slurp(Path("agent.log"));
  const int64_t scheduled_ms = NowUnixMs();
  {
    httplib::Client control("127.0.0.1", emulator_port_);
    auto r =
        control.Post("/emulator/notice?instance=i-notice&cloud=aws&in_ms=300&effective_in_ms=5000",
                     "", "text/plain");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
  }
  const auto status = agent.Wait(std::chrono::seconds(20));
  ASSERT_TRUE(status.has_value()) << Slurp(Path("agent.log"));
  EXPECT_EQ(*status, 0) << Slurp(Path("agent.log"));
  const nlohmann::json notice = nlohmann::json::parse(Slurp(seen));
  EXPECT_EQ(notice["kind"], "notice");
  EXPECT_EQ(notice["action"], "terminate");
  EXPECT_EQ(notice["cloud"], "aws");
  EXPECT_EQ(notice["instance_id"], "i-notice");
  const int64_t deadline = notice["deadline_unix_ms"];
  EXPECT_GE(deadline, scheduled_ms + 4000);
  EXPECT_LE(deadline, scheduled_ms + 6000);
  EXPECT_FALSE(notice["deadline"].get<std::string>().empty());
  const int64_t got_ms = std::stoll(Slurp(seen_at));
  EXPECT_LT(got_ms, deadline);  // before the instance is stopped
  EXPECT_THAT(Slurp(Path("agent.log")), HasSubstr("checkpointed\n"));
  std::cout << "[measured] notice test: the command had the signal and the file "
            << got_ms - (scheduled_ms + 300) << " ms after the notice appeared on the "
            << "metadata endpoint (poll interval 100 ms), " << deadline - got_ms
            << " ms before the deadline" << std::endl;
}

TEST_F(InstanceWrapperBinaries, ANoticeSignalOfTheUsersChoice) {
  StartEmulator();
  const std::string script = absl::StrCat(
      "trap 'echo got USR1; test -s \"$SPOTDNN_NOTICE_FILE\" && echo file there; exit 4' USR1; "
      "echo ready; while true; do sleep 0.05; done");
  Process agent(Agent("i-usr1", "job-notice",
                      {"--profiler=none", "--notice_signal=USR1", "--", "/bin/sh", "-c", script}),
                {}, Path("agent.log"));
  ASSERT_TRUE(WaitForText(Path("agent.log"), "ready\n"));
  httplib::Client control("127.0.0.1", emulator_port_);
  auto r = control.Post("/emulator/notice?instance=i-usr1&cloud=aws&in_ms=100", "", "text/plain");
  ASSERT_TRUE(r);
  const auto status = agent.Wait(std::chrono::seconds(20));
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(*status, 4);
  const std::string log = Slurp(Path("agent.log"));
  EXPECT_THAT(log, HasSubstr("got USR1\nfile there\n"));
}

TEST_F(InstanceWrapperBinaries, ExitStatusesAndForwardedSignals) {
  StartEmulator();
  {
    Process agent(Agent("i-exit", "j", {"--profiler=none", "--", "/bin/sh", "-c", "exit 7"}), {},
                  Path("a.log"));
    EXPECT_EQ(agent.Wait(std::chrono::seconds(20)), 7);
  }
  {
    Process agent(Agent("i-term", "j", {"--profiler=none", "--", "sleep", "30"}), {},
                  Path("b.log"));
    ASSERT_TRUE(WaitForText(Path("b.log"), "started the command"));
    const auto sent = Clock::now();
    kill(agent.pid(), SIGTERM);
    EXPECT_EQ(agent.Wait(std::chrono::seconds(20)), 128 + SIGTERM);
    std::cout << "[measured] SIGTERM to the agent -> agent exited " << SecondsSince(sent)
              << " s later (sleep killed by the forwarded signal)" << std::endl;
  }
  {
    Process agent(Agent("i-404", "j", {"--", "spotdnn-no-such-program"}), {}, Path("c.log"));
    EXPECT_EQ(agent.Wait(std::chrono::seconds(20)), 127);
    EXPECT_THAT(Slurp(Path("c.log")), HasSubstr("spotdnn-no-such-program"));
  }
  {
    Process agent(Agent("i-none", "j", {"--"}), {}, Path("d.log"));
    EXPECT_EQ(agent.Wait(std::chrono::seconds(20)), 2);
    EXPECT_THAT(Slurp(Path("d.log")), HasSubstr("no command after --"));
  }
  {
    Process agent(Agent("i-stray", "j", {"python", "--", "x"}), {}, Path("e.log"));
    EXPECT_EQ(agent.Wait(std::chrono::seconds(20)), 2);
    EXPECT_THAT(Slurp(Path("e.log")), HasSubstr("unexpected argument \"python\""));
  }
  {
    Process agent(Agent("i-sig", "j", {"--notice_signal=TERMINATE", "--", "true"}), {},
                  Path("f.log"));
    EXPECT_EQ(agent.Wait(std::chrono::seconds(20)), 2);
    EXPECT_THAT(Slurp(Path("f.log")), HasSubstr("--notice_signal = \"TERMINATE\""));
  }
}

TEST_F(InstanceWrapperBinaries, FlagsDefaultFromTheInstanceEnvironment) {
  StartEmulator();
  const int port = FreeLoopbackPort();
  auto profiler = StartProfiler(port);
  Process agent(
      {kBin + "/spotdnn-agent", "--poll_interval=100ms", "--", "/bin/sh", "-c",
       "echo notice file: $SPOTDNN_NOTICE_FILE; "
       "echo 'SPOTDNN_SAMPLE step=1 iteration_time_s=0.3'"},
      {"SPOTDNN_CLOUD=aws", "SPOTDNN_INSTANCE_ID=i-env", "SPOTDNN_JOB_ID=job-env",
       "SPOTDNN_METADATA_ENDPOINT=" + Endpoint("i-env"),
       absl::StrCat("SPOTDNN_PROFILER=127.0.0.1:", port), "SPOTDNN_INSTANCE_TYPE=p3.2xlarge",
       "SPOTDNN_WORKERS=4", "SPOTDNN_BATCH_SIZE=64", "TMPDIR=" + dir_.string()},
      Path("agent.log"));
  ASSERT_EQ(agent.Wait(std::chrono::seconds(30)), 0) << Slurp(Path("agent.log"));
  EXPECT_THAT(Slurp(Path("agent.log")),
              HasSubstr("notice file: " + Path("spotdnn-notice-i-env.json") + "\n"));
  EXPECT_TRUE(fs::exists(Path("spotdnn-samples-i-env.spool")));
  const v1::GetJobProgressResponse progress = Progress(port, "job-env");
  ASSERT_EQ(progress.workers_size(), 1);
  EXPECT_EQ(progress.workers(0).worker_id(), "i-env");
  EXPECT_EQ(progress.workers(0).instance_type(), "p3.2xlarge");
  EXPECT_EQ(progress.workers(0).steps(), 1);
}

// If the agent is killed outright, its guard stops the command's process group.
TEST_F(InstanceWrapperBinaries, AKilledAgentTakesItsCommandWithIt) {
  StartEmulator();
  const std::string pid_file = Path("sleeper.pid");
  Process agent(Agent("i-orphan", "j",
                      {"--profiler=none", "--orphan_grace=500ms", "--", "/bin/sh", "-c",
                       "sleep 60 & echo $! > " + pid_file + "; wait"}),
                {}, Path("agent.log"));
  ASSERT_TRUE(WaitForText(pid_file, "\n"));
  const pid_t sleeper = std::stoi(Slurp(pid_file));
  ASSERT_TRUE(Alive(sleeper));
  const auto killed = Clock::now();
  kill(agent.pid(), SIGKILL);
  agent.Wait(std::chrono::seconds(5));
  bool gone = false;
  for (int i = 0; i < 500 && !gone; ++i) {
    gone = !Alive(sleeper);
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(gone);
  std::cout << "[measured] agent SIGKILLed -> its command's process group gone "
            << SecondsSince(killed) << " s later" << std::endl;
}

// The checkpoint folder round trip through S3 (the fake, signatures checked): one instance
// writes a checkpoint and a manifest, a takeover instance finds them before it starts.
TEST_F(InstanceWrapperBinaries, TheCheckpointFolderIsRestoredOnTheNextInstance) {
  StartEmulator();
  launcher::testing::FakeS3 s3("AKIDWRAPPER", "wrapper-secret-key");
  s3.CreateBucket("spotdnn-ckpt");
  const std::vector<std::string> credentials = {
      "AWS_ACCESS_KEY_ID=AKIDWRAPPER", "AWS_SECRET_ACCESS_KEY=wrapper-secret-key",
      "AWS_EC2_METADATA_DISABLED=true", "AWS_SHARED_CREDENTIALS_FILE=/nonexistent"};
  const std::vector<std::string> sync = {"--checkpoint_uri=s3://spotdnn-ckpt/jobs/j1",
                                         "--s3_endpoint=" + s3.url(), "--profiler=none"};
  {
    std::vector<std::string> flags = sync;
    flags.insert(flags.end(),
                 {"--checkpoint_dir=" + Path("ps-a"), "--", "/bin/sh", "-c",
                  "printf weights > \"$SPOTDNN_CHECKPOINT_DIR/ckpt-5.bin\"; printf '{\"step\": "
                  "5, \"file\": \"ckpt-5.bin\"}' > \"$SPOTDNN_CHECKPOINT_DIR/ps-0.json\""});
    Process first(Agent("i-ps-a", "j1", flags), credentials, Path("first.log"));
    ASSERT_EQ(first.Wait(std::chrono::seconds(30)), 0) << Slurp(Path("first.log"));
  }
  const auto objects = s3.objects("spotdnn-ckpt");
  ASSERT_EQ(objects.size(), 2u) << Slurp(Path("first.log"));
  EXPECT_EQ(objects.at("jobs/j1/ckpt-5.bin"), "weights");
  std::vector<std::string> flags = sync;
  flags.insert(flags.end(), {"--checkpoint_dir=" + Path("ps-b"), "--", "/bin/sh", "-c",
                             // One line: the agent's own log lines share the file.
                             "printf '%s|%s\\n' \"$(cat \"$SPOTDNN_CHECKPOINT_DIR/ps-0.json\")\" "
                             "\"$(cat \"$SPOTDNN_CHECKPOINT_DIR/ckpt-5.bin\")\""});
  Process second(Agent("i-ps-b", "j1", flags), credentials, Path("second.log"));
  ASSERT_EQ(second.Wait(std::chrono::seconds(30)), 0) << Slurp(Path("second.log"));
  const std::string log = Slurp(Path("second.log"));
  EXPECT_THAT(log, HasSubstr("{\"step\": 5, \"file\": \"ckpt-5.bin\"}|weights\n"));
  EXPECT_THAT(log, HasSubstr("2 files"));
}

}  // namespace
}  // namespace spotdnn::services
