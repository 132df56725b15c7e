// The instance wrapper's pieces in-process: the wrapped command (its process group, output,
// exit, signals), sample lines, the notice file, signal names and program lookup.
#include "services/detector/instance_wrapper.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace spotdnn::services {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

class Lines {
 public:
  WrappedCommand::LineSink Sink() {
    return [this](absl::string_view line) {
      std::lock_guard<std::mutex> lock(mu_);
      lines_.emplace_back(line);
    };
  }
  std::vector<std::string> Get() {
    std::lock_guard<std::mutex> lock(mu_);
    return lines_;
  }

 private:
  std::mutex mu_;
  std::vector<std::string> lines_;
};

std::unique_ptr<WrappedCommand> StartShell(const std::string& script, Lines& lines,
                                           WrappedCommandOptions options = {}) {
  options.argv = {"sh", "-c", script};
  options.output_fd = -1;
  auto c = WrappedCommand::Start(options, lines.Sink());
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? std::move(*c) : nullptr;
}

// Running (a zombie waiting for its new parent to reap it counts as gone).
bool Alive(pid_t pid) {
  if (kill(pid, 0) != 0) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string content((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t paren = content.rfind(')');
  return paren == std::string::npos || paren + 2 >= content.size() || content[paren + 2] != 'Z';
}

std::string Slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class WrappedCommandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("instance_wrapper_test_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(WrappedCommandTest, CopiesStdoutAndStderrLineByLineAndReportsTheExitStatus) {
  Lines lines;
  auto c = StartShell("echo one; echo two >&2; printf 'three\\r\\nfour'; exit 3", lines);
  auto exit = c->Wait(absl::Seconds(10));
  ASSERT_TRUE(exit.has_value());
  EXPECT_FALSE(exit->signaled);
  EXPECT_EQ(exit->code, 3);
  EXPECT_EQ(exit->ShellStatus(), 3);
  EXPECT_TRUE(c->FinishOutput(absl::Seconds(5)));
  EXPECT_THAT(lines.Get(), ElementsAre("one", "two", "three", "four"));
  EXPECT_EQ(c->lines(), 4u);
}

TEST_F(WrappedCommandTest, CopiesOutputToTheGivenDescriptor) {
  Lines lines;
  const fs::path log = dir_ / "instance.log";
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  WrappedCommandOptions o;
  o.argv = {"sh", "-c", "echo a; echo b"};
  o.output_fd = fd;
  auto c = WrappedCommand::Start(o, lines.Sink());
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE((*c)->Wait(absl::Seconds(10)).has_value());
  (*c)->FinishOutput(absl::Seconds(5));
  ::close(fd);
  EXPECT_EQ(Slurp(log), "a\nb\n");
}

TEST_F(WrappedCommandTest, AKilledCommandReportsItsSignal) {
  Lines lines;
  auto c = StartShell("kill -USR1 $$", lines);
  auto exit = c->Wait(absl::Seconds(10));
  ASSERT_TRUE(exit.has_value());
  EXPECT_TRUE(exit->signaled);
  EXPECT_EQ(exit->code, SIGUSR1);
  EXPECT_EQ(exit->ShellStatus(), 128 + SIGUSR1);
  EXPECT_THAT(exit->Describe(), HasSubstr("signal 10"));
}

TEST_F(WrappedCommandTest, ASignalReachesEveryProcessOfTheGroupButNotTheGuard) {
  Lines lines;
  const fs::path pid_file = dir_ / "pid";
  // The shell traps TERM and reports it; its background child is killed by it.
  auto c = StartShell("sleep 60 & echo $! > " + pid_file.string() +
                          "; trap 'echo got TERM; exit 0' TERM; echo ready; wait",
                      lines);
  for (int i = 0; i < 500 && (lines.Get().empty() || !fs::exists(pid_file)); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_THAT(lines.Get(), ElementsAre("ready"));
  const pid_t sleeper = std::stoi(Slurp(pid_file));
  EXPECT_EQ(getpgid(sleeper), c->process_group());
  ASSERT_TRUE(c->Signal(SIGTERM).ok());
  auto exit = c->Wait(absl::Seconds(10));
  ASSERT_TRUE(exit.has_value());
  // The command's own status, not the guard's (which ignores the signal and reports it).
  EXPECT_FALSE(exit->signaled);
  EXPECT_EQ(exit->code, 0);
  c->FinishOutput(absl::Seconds(5));
  EXPECT_THAT(lines.Get(), ElementsAre("ready", "got TERM"));
  for (int i = 0; i < 200 && Alive(sleeper); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_FALSE(Alive(sleeper));
}

// A revocation notice's SIGTERM kills a shell that runs the trainer (`sh -c "python3 train.py"`
// does not always exec), while the trainer uses its notice window: the command has ended only
// when the trainer has, so that the agent forwards its output until then.
TEST_F(WrappedCommandTest, AfterASignalTheCommandEndsWhenEveryProcessItStartedHasEnded) {
  Lines lines;
  const fs::path pid_file = dir_ / "pid";
  auto c = StartShell("sh -c 'echo $$ > " + pid_file.string() +
                          "; trap \"sleep 1; echo checkpoint saved; exit 0\" TERM; echo ready; "
                          "while :; do sleep 0.05; done'; echo the shell went on",
                      lines);
  for (int i = 0; i < 500 && (lines.Get().empty() || Slurp(pid_file).empty()); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_THAT(lines.Get(), ElementsAre("ready"));
  const pid_t trainer = std::stoi(Slurp(pid_file));
  ASSERT_TRUE(c->Signal(SIGTERM).ok());
  auto exit = c->Wait(absl::Seconds(10));
  ASSERT_TRUE(exit.has_value());
  EXPECT_FALSE(Alive(trainer)) << "the command was reported ended while the trainer ran";
  // The shell's own status: it died of the signal.
  EXPECT_TRUE(exit->signaled);
  EXPECT_EQ(exit->code, SIGTERM);
  EXPECT_TRUE(c->FinishOutput(absl::Seconds(5)));
  // (The trainer's shell may say its sleep was "Terminated" in between.)
  const std::vector<std::string> got = lines.Get();
  ASSERT_GE(got.size(), 2u);
  EXPECT_EQ(got.front(), "ready");
  EXPECT_EQ(got.back(), "checkpoint saved");
  EXPECT_THAT(got, ::testing::Not(::testing::Contains("the shell went on")));
}

TEST_F(WrappedCommandTest, TheGuardHoldsNoDescriptorOfTheAgent) {
  // A descriptor the agent holds open (no close-on-exec, as a socket or file might be).
  const int held = ::open((dir_ / "held").c_str(), O_WRONLY | O_CREAT, 0644);
  ASSERT_GE(held, 0);
  Lines lines;
  // The command's parent is the guard: it keeps stdin, stdout, stderr and its socket to the agent.
  auto c = StartShell("sleep 0.3; ls /proc/$PPID/fd", lines);
  ASSERT_TRUE(c->Wait(absl::Seconds(10)).has_value());
  c->FinishOutput(absl::Seconds(5));
  ::close(held);
  const std::vector<std::string> fds = lines.Get();
  EXPECT_EQ(fds.size(), 4u) << ::testing::PrintToString(fds);
  EXPECT_THAT(fds, ::testing::Not(::testing::Contains(std::to_string(held))));
}

TEST_F(WrappedCommandTest, TheCommandGetsTheExtraEnvironment) {
  Lines lines;
  WrappedCommandOptions o;
  o.env = {{"SPOTDNN_NOTICE_FILE", "/x/notice.json"}, {"HOME", "/elsewhere"}};
  auto c = StartShell("echo $SPOTDNN_NOTICE_FILE $HOME", lines, o);
  ASSERT_TRUE(c->Wait(absl::Seconds(10)).has_value());
  c->FinishOutput(absl::Seconds(5));
  EXPECT_THAT(lines.Get(), ElementsAre("/x/notice.json /elsewhere"));
}

TEST_F(WrappedCommandTest, ALongLineIsPassedOnInPieces) {
  Lines lines;
  WrappedCommandOptions o;
  o.max_line = 1000;
  // Written in two parts, so that the reads cut the line where the pieces do not.
  auto c = StartShell(
      "head -c 1500 /dev/zero | tr '\\0' x; sleep 0.2; head -c 1000 /dev/zero | tr '\\0' y; "
      "echo; echo end",
      lines, o);
  ASSERT_TRUE(c->Wait(absl::Seconds(10)).has_value());
  c->FinishOutput(absl::Seconds(5));
  const std::vector<std::string> got = lines.Get();
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[0], std::string(1000, 'x'));
  EXPECT_EQ(got[1], std::string(500, 'x') + std::string(500, 'y'));
  EXPECT_EQ(got[2], std::string(500, 'y'));
  EXPECT_EQ(got[3], "end");
}

TEST_F(WrappedCommandTest, OutputHeldByALeftoverProcessIsAbandonedAfterTheTimeout) {
  Lines lines;
  const fs::path pid_file = dir_ / "pid";
  auto c = StartShell("sleep 30 & echo $! > " + pid_file.string() + "; echo bye", lines);
  auto exit = c->Wait(absl::Seconds(10));
  ASSERT_TRUE(exit.has_value());
  EXPECT_FALSE(c->FinishOutput(absl::Milliseconds(200)));
  EXPECT_THAT(lines.Get(), ElementsAre("bye"));
  const pid_t sleeper = std::stoi(Slurp(pid_file));
  ASSERT_TRUE(c->Signal(SIGKILL).ok());  // the group outlives the command; it can be signalled
  for (int i = 0; i < 200 && Alive(sleeper); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_FALSE(Alive(sleeper));
}

TEST_F(WrappedCommandTest, DestroyingItKillsARunningCommand) {
  Lines lines;
  const fs::path pid_file = dir_ / "pid";
  pid_t sleeper = 0;
  {
    auto c = StartShell("sleep 60 & echo $! > " + pid_file.string() + "; wait", lines);
    for (int i = 0; i < 500 && Slurp(pid_file).empty(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    sleeper = std::stoi(Slurp(pid_file));
    EXPECT_TRUE(Alive(sleeper));
  }
  for (int i = 0; i < 200 && Alive(sleeper); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_FALSE(Alive(sleeper));
}

TEST_F(WrappedCommandTest, AMissingProgramIsNotFound) {
  Lines lines;
  WrappedCommandOptions o;
  o.argv = {"spotdnn-no-such-program-xyz"};
  auto c = WrappedCommand::Start(o, lines.Sink());
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("spotdnn-no-such-program-xyz"));
  o.argv = {};
  EXPECT_EQ(WrappedCommand::Start(o, lines.Sink()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(WrappedCommandTest, FindProgramSearchesThePathAndChecksPaths) {
  auto sh = FindProgram("sh", "/nonexistent:/bin:/usr/bin");
  ASSERT_TRUE(sh.ok());
  EXPECT_EQ(*sh, "/bin/sh");
  EXPECT_EQ(FindProgram("/bin/sh", "").value(), "/bin/sh");
  const fs::path plain = dir_ / "not-executable";
  std::ofstream(plain) << "data";
  fs::permissions(plain, fs::perms::owner_read | fs::perms::owner_write);
  EXPECT_EQ(FindProgram(plain.string(), "").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(FindProgram("not-executable", dir_.string()).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(FindProgram("sh", "/nonexistent").status().code(), absl::StatusCode::kNotFound);
}

TEST(ParseSignal, NamesNumbersAndNone) {
  EXPECT_EQ(ParseSignal("f", "TERM").value(), SIGTERM);
  EXPECT_EQ(ParseSignal("f", "sigusr1").value(), SIGUSR1);
  EXPECT_EQ(ParseSignal("f", "USR2").value(), SIGUSR2);
  EXPECT_EQ(ParseSignal("f", "HUP").value(), SIGHUP);
  EXPECT_EQ(ParseSignal("f", "INT").value(), SIGINT);
  EXPECT_EQ(ParseSignal("f", "10").value(), 10);
  EXPECT_EQ(ParseSignal("f", "none").value(), 0);
  for (const char* bad : {"TERMINATE", "", "-1", "65", "99999"}) {
    auto s = ParseSignal("--notice_signal", bad);
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_THAT(std::string(s.status().message()),
                HasSubstr(std::string("--notice_signal = \"") + bad + "\""));
  }
}

TEST(SampleLineReader, FillsWhatTheLineLeavesOutAndCountsMalformedLines) {
  SampleLineReader reader({.job_id = "job-1",
                           .worker_id = "i-123",
                           .instance_type = "p3.2xlarge",
                           .cluster_workers = 4,
                           .batch_size = 128},
                          2);
  EXPECT_FALSE(reader.Read("epoch 1 done").has_value());
  auto s = reader.Read("[INFO] SPOTDNN_SAMPLE step=7 iteration_time_s=0.25 loss=2.5");
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->job_id(), "job-1");
  EXPECT_EQ(s->worker_id(), "i-123");
  EXPECT_EQ(s->instance_type(), "p3.2xlarge");
  EXPECT_EQ(s->cluster_workers(), 4);
  EXPECT_EQ(s->batch_size(), 128);
  EXPECT_EQ(s->step(), 7);
  EXPECT_DOUBLE_EQ(s->loss(), 2.5);
  // What the line says wins.
  auto t = reader.Read("SPOTDNN_SAMPLE job_id=other worker_id=w3 batch_size=64 step=8 loss=2");
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->job_id(), "other");
  EXPECT_EQ(t->worker_id(), "w3");
  EXPECT_EQ(t->batch_size(), 64);

  EXPECT_FALSE(reader.Read("SPOTDNN_SAMPLE step=x loss=1").has_value());
  EXPECT_FALSE(reader.Read("SPOTDNN_SAMPLE step=9 loss=-1").has_value());
  EXPECT_FALSE(reader.Read("SPOTDNN_SAMPLE step=9 lossy").has_value());
  EXPECT_EQ(reader.lines(), 6u);
  EXPECT_EQ(reader.sample_lines(), 5u);
  EXPECT_EQ(reader.malformed(), 3u);
  // Only the first two reasons are kept, with their line numbers.
  ASSERT_EQ(reader.reasons().size(), 2u);
  EXPECT_THAT(reader.reasons()[0], HasSubstr("line 4: step = \"x\""));
  EXPECT_THAT(reader.reasons()[1], HasSubstr("line 5: loss"));
}

// A DDP rank's line under torchrun: the placement and the all-reduce time travel to the profiler,
// and the ranks are the placement's, not the agent's worker count.
TEST(SampleLineReader, ForwardsASynchronousSample) {
  SampleLineReader reader({.job_id = "job-1", .worker_id = "i-123", .cluster_workers = 2});
  auto s = reader.Read(
      "[default0]:SPOTDNN_SAMPLE gpu_type=T4 placement=4,4 local_batch=32 step=5 "
      "iteration_time_s=0.2 sync_time_s=0.12");
  ASSERT_TRUE(s.has_value()) << (reader.reasons().empty() ? "" : reader.reasons()[0]);
  EXPECT_EQ(s->placement(), "4,4");
  EXPECT_EQ(s->cluster_workers(), 0);
  EXPECT_EQ(s->batch_size(), 32);
  EXPECT_DOUBLE_EQ(s->communication_time_s(), 0.12);
  EXPECT_FALSE(reader
                   .Read("SPOTDNN_SAMPLE placement=4,4 step=6 iteration_time_s=0.2 "
                         "sync_time_s=0.3")
                   .has_value());
  ASSERT_EQ(reader.reasons().size(), 1u);
  EXPECT_THAT(reader.reasons()[0], HasSubstr("exceeds iteration_time_s"));
}

// A rank may say its instances and GPUs per instance instead of the placement: the agent forwards
// the placement they make, and names a field that does not fit.
TEST(SampleLineReader, ForwardsInstancesAndGpusPerInstanceAsThePlacement) {
  SampleLineReader reader({.job_id = "job-1", .worker_id = "i-123", .cluster_workers = 2});
  auto s = reader.Read(
      "[default3]:SPOTDNN_SAMPLE gpu_type=T4 instances=2 gpus_per_instance=4 ranks=8 "
      "local_batch=32 step=5 step_time=0.2 sync_time=0.12");
  ASSERT_TRUE(s.has_value()) << (reader.reasons().empty() ? "" : reader.reasons()[0]);
  EXPECT_EQ(s->placement(), "4,4");
  EXPECT_EQ(s->cluster_workers(), 8);
  EXPECT_EQ(s->batch_size(), 32);
  EXPECT_DOUBLE_EQ(s->iteration_time_s(), 0.2);
  EXPECT_DOUBLE_EQ(s->communication_time_s(), 0.12);
  EXPECT_FALSE(reader
                   .Read("SPOTDNN_SAMPLE instances=2 gpus_per_instance=4 ranks=6 local_batch=32 "
                         "step=6 step_time=0.2")
                   .has_value());
  EXPECT_FALSE(
      reader.Read("SPOTDNN_SAMPLE instances=2 local_batch=32 step=7 step_time=0.2").has_value());
  EXPECT_FALSE(
      reader.Read("SPOTDNN_SAMPLE placement=4,4 local_batch=0 step=8 step_time=0.2").has_value());
  ASSERT_EQ(reader.reasons().size(), 3u);
  EXPECT_THAT(reader.reasons()[0], HasSubstr("cluster_workers = 6: the placement \"4,4\""));
  EXPECT_THAT(reader.reasons()[1], HasSubstr("instances = 2: give instances= and"));
  EXPECT_THAT(reader.reasons()[2], HasSubstr("local_batch = 0"));
}

TEST(SampleLineReader, ASampleWithoutAJobIsMalformed) {
  SampleLineReader reader({});
  EXPECT_FALSE(reader.Read("SPOTDNN_SAMPLE step=1 loss=1").has_value());
  ASSERT_EQ(reader.reasons().size(), 1u);
  EXPECT_THAT(reader.reasons()[0], HasSubstr("job_id is empty"));
}

TEST(NoticeFile, HoldsTheActionAndTheDeadline) {
  NoticeInfo n{.action = "terminate",
               .cloud = "aws",
               .instance_id = "i-0abc",
               .notice_unix_ms = 1'800'000'000'000,
               .deadline_unix_ms = 1'800'000'120'250};
  const nlohmann::json j = nlohmann::json::parse(NoticeFileJson(n));
  EXPECT_EQ(j["kind"], "notice");
  EXPECT_EQ(j["action"], "terminate");
  EXPECT_EQ(j["cloud"], "aws");
  EXPECT_EQ(j["instance_id"], "i-0abc");
  EXPECT_EQ(j["notice_unix_ms"], 1'800'000'000'000);
  EXPECT_EQ(j["deadline_unix_ms"], 1'800'000'120'250);
  EXPECT_EQ(j["deadline"], "2027-01-15T08:02:00.250Z");
  n.deadline_unix_ms = 0;
  const nlohmann::json k = nlohmann::json::parse(NoticeFileJson(n));
  EXPECT_EQ(k["deadline_unix_ms"], 0);
  EXPECT_EQ(k["deadline"], "");
}

TEST_F(WrappedCommandTest, WriteFileAtomicallyReplacesTheWholeFile) {
  const fs::path p = dir_ / "sub" / "notice.json";
  ASSERT_TRUE(WriteFileAtomically(p.string(), "first").ok());
  ASSERT_TRUE(WriteFileAtomically(p.string(), "second").ok());
  EXPECT_EQ(Slurp(p), "second");
  int files = 0;
  for (const auto& e : fs::directory_iterator(p.parent_path())) {
    (void)e;
    ++files;
  }
  EXPECT_EQ(files, 1);  // no temporary file left behind
  auto bad = WriteFileAtomically("/proc/no/such/notice.json", "x");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.message()), HasSubstr("/proc/no/such"));
}

}  // namespace
}  // namespace spotdnn::services
