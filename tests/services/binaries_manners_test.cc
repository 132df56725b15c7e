// Every spotdnn binary behaves like the CLI with its command line. Each is run as a
// process with a stray argument, an unknown flag, a typo'd flag, a bad value, `--help`, and (the
// profiler and detector) a store in a missing folder; the exit statuses expected are read from the
// README's exit-status table, so the test fails when the README and the binaries disagree.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

struct Proc {
  int code = -1;  // -1: killed by a signal; -2: still running after the timeout (then killed)
  std::string out, err;
};

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The README's exit-status table: for each program, its row's cells by exit status.
std::map<std::string, std::map<int, std::string>> ReadmeExitTable() {
  std::ifstream in(std::string(SPOTDNN_SOURCE_DIR) + "/README.md");
  std::string line;
  std::vector<int> codes;
  std::map<std::string, std::map<int, std::string>> table;
  bool in_table = false;
  while (std::getline(in, line)) {
    if (absl::StartsWith(line, "| program | 0 |")) {
      in_table = true;
      std::vector<std::string> cells = absl::StrSplit(line, '|');
      for (size_t i = 2; i + 1 < cells.size(); ++i) {
        codes.push_back(std::stoi(std::string(absl::StripAsciiWhitespace(cells[i]))));
      }
      continue;
    }
    if (!in_table) continue;
    if (!absl::StartsWith(line, "|")) break;
    if (absl::StartsWith(line, "| ---")) continue;
    std::vector<std::string> cells = absl::StrSplit(line, '|');
    if (cells.size() < codes.size() + 3) continue;
    std::string program(absl::StripAsciiWhitespace(cells[1]));
    program = std::string(absl::StripSuffix(absl::StripPrefix(program, "`"), "`"));
    for (size_t i = 0; i < codes.size(); ++i) table[program][codes[i]] = cells[i + 2];
  }
  return table;
}

// The status whose cell in `row` mentions `what` (-1 when none does).
int StatusFor(const std::map<int, std::string>& row, const std::string& what) {
  for (const auto& [code, cell] : row) {
    if (absl::StrContains(cell, what)) return code;
  }
  return -1;
}

class BinariesManners : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/spotdnn-manners.XXXXXX";
    dir_ = mkdtemp(pattern);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // BINARY ARGS... in dir_; killed (code -2) when still running after 10 s: a binary that starts
  // serving on bad input fails here rather than hanging the test.
  Proc Run(const std::string& binary, const std::vector<std::string>& args) {
    const std::string out = dir_ + "/.out", err = dir_ + "/.err";
    const pid_t pid = fork();
    if (pid == 0) {
      const int in = open("/dev/null", O_RDONLY);
      const int o = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      const int e = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(in, 0);
      dup2(o, 1);
      dup2(e, 2);
      if (chdir(dir_.c_str()) != 0) _exit(126);
      std::vector<std::string> argv = {absl::StrCat(SPOTDNN_BINARY_DIR, "/", binary)};
      argv.insert(argv.end(), args.begin(), args.end());
      std::vector<char*> raw;
      for (std::string& a : argv) raw.push_back(a.data());
      raw.push_back(nullptr);
      execv(raw[0], raw.data());
      _exit(127);
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    int status = 0;
    int code = -2;
    while (true) {
      if (waitpid(pid, &status, WNOHANG) == pid) {
        code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        break;
      }
      if (std::chrono::steady_clock::now() > deadline) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return {code, ReadAll(out), ReadAll(err)};
  }

  // BINARY ARGS... in dir_ in the background, its output in `log`; the caller waits for it.
  pid_t Spawn(const std::string& binary, const std::vector<std::string>& args,
              const std::string& log) {
    const pid_t pid = fork();
    if (pid == 0) {
      const int in = open("/dev/null", O_RDONLY);
      const int o = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(in, 0);
      dup2(o, 1);
      dup2(o, 2);
      if (chdir(dir_.c_str()) != 0) _exit(126);
      std::vector<std::string> argv = {absl::StrCat(SPOTDNN_BINARY_DIR, "/", binary)};
      argv.insert(argv.end(), args.begin(), args.end());
      std::vector<char*> raw;
      for (std::string& a : argv) raw.push_back(a.data());
      raw.push_back(nullptr);
      execv(raw[0], raw.data());
      _exit(127);
    }
    return pid;
  }

  std::string dir_;
};

// What each binary is tried with: a typo of one of its flags, and a bad value of one.
struct Binary {
  std::string name;
  std::string typo;                 // e.g. "--lisen=127.0.0.1:0"
  std::string meant;                // "--listen"
  std::string bad_value;            // e.g. "--poll_interval=1"
  std::string says;                 // what the error says about it
  std::vector<std::string> groups;  // --help's group names
};

const std::vector<Binary>& Binaries() {
  static const auto* binaries = new std::vector<Binary>{
      {"spotdnn-predictor",
       "--lisen=127.0.0.1:0",
       "--listen",
       "--insecure=maybe",
       "not true or false",
       {"Serving", "Security", "Metrics", "Catalogs and workloads"}},
      {"spotdnn-provisioner",
       "--lisen=127.0.0.1:0",
       "--listen",
       "--max_solve_time=1",
       "like 500ms, 2s",
       {"Serving", "Security", "Metrics", "Planning"}},
      {"spotdnn-profiler",
       "--lisen=127.0.0.1:0",
       "--listen",
       "--max_import_bytes=lots",
       "not a whole number",
       {"Serving", "Store", "Security", "Metrics", "Imports"}},
      {"spotdnn-detector",
       "--lisen=127.0.0.1:0",
       "--listen",
       "--poll_interval=1",
       "like 500ms, 2s",
       {"Serving", "Store", "Detection", "Replicas", "Security"}},
      {"spotdnn-agent",
       "--detecor=127.0.0.1:1",
       "--detector",
       "--poll_interval=1",
       "like 500ms, 2s",
       {"Instance", "Detection", "Samples", "Checkpoints", "Security"}},
      {"spotdnn-metadata-emulator",
       "--prot=0",
       "--port",
       "--port=eighty",
       "not a whole number",
       {"Serving"}},
      {"spotdnn-sim-worker",
       "--profilr=127.0.0.1:1",
       "--profiler",
       "--report_interval=1",
       "like 500ms, 2s",
       {"Samples", "Simulation"}},
  };
  return *binaries;
}

TEST_F(BinariesManners, ReadmeExitTableCoversEveryBinary) {
  const auto table = ReadmeExitTable();
  ASSERT_FALSE(table.empty()) << "no `| program | 0 | ...` table in README.md";
  for (const Binary& b : Binaries()) {
    ASSERT_TRUE(table.contains(b.name)) << b.name << " has no row in the README's table";
    EXPECT_EQ(StatusFor(table.at(b.name), "bad input"), 2) << b.name;
    EXPECT_EQ(StatusFor(table.at(b.name), "`--help`"), 0) << b.name;
  }
  ASSERT_TRUE(table.contains("spotdnn"));
  EXPECT_EQ(StatusFor(table.at("spotdnn"), "bad input"), 2);
}

TEST_F(BinariesManners, BadCommandLinesExitAsTheReadmeSays) {
  const auto table = ReadmeExitTable();
  for (const Binary& b : Binaries()) {
    SCOPED_TRACE(b.name);
    ASSERT_TRUE(table.contains(b.name));
    const int bad_input = StatusFor(table.at(b.name), "bad input");

    Proc stray = Run(b.name, {"extra-arg"});
    EXPECT_EQ(stray.code, bad_input) << stray.err;
    EXPECT_THAT(stray.err, HasSubstr("unexpected argument \"extra-arg\""));

    Proc unknown = Run(b.name, {"--zzqqxx=1"});
    EXPECT_EQ(unknown.code, bad_input) << unknown.err;
    EXPECT_THAT(unknown.err, HasSubstr("--zzqqxx: unknown flag"));

    Proc typo = Run(b.name, {b.typo});
    EXPECT_EQ(typo.code, bad_input) << typo.err;
    EXPECT_THAT(typo.err, HasSubstr(absl::StrCat("unknown flag; did you mean ", b.meant, "?")));

    Proc bad = Run(b.name, {b.bad_value});
    EXPECT_EQ(bad.code, bad_input) << bad.err;
    EXPECT_THAT(bad.err, HasSubstr(b.bad_value));
    EXPECT_THAT(bad.err, HasSubstr(b.says));
    // One line, not a page of usage.
    EXPECT_LE(std::count(bad.err.begin(), bad.err.end(), '\n'), 1) << bad.err;
  }
}

TEST_F(BinariesManners, HelpExitsZeroWithGroupsByPurposeAndNoSourcePaths) {
  const auto table = ReadmeExitTable();
  for (const Binary& b : Binaries()) {
    SCOPED_TRACE(b.name);
    ASSERT_TRUE(table.contains(b.name));
    Proc help = Run(b.name, {"--help"});
    EXPECT_EQ(help.code, StatusFor(table.at(b.name), "`--help`")) << help.err;
    for (const std::string& group : b.groups) {
      EXPECT_THAT(help.out, HasSubstr("\n" + group + ":\n"));
    }
    EXPECT_THAT(help.out, HasSubstr(b.meant));
    EXPECT_THAT(help.out, Not(HasSubstr("Flags from")));
    EXPECT_THAT(help.out, Not(HasSubstr(SPOTDNN_SOURCE_DIR)));
    EXPECT_THAT(help.out, Not(HasSubstr("/work")));
    EXPECT_THAT(help.out, Not(HasSubstr(".cc")));
    Proc version = Run(b.name, {"--version"});
    EXPECT_EQ(version.code, 0);
    EXPECT_THAT(version.out, HasSubstr(b.name + " "));
  }
}

// Each flag's default is said once: a help text that says its own ("default: $SPOTDNN_PROFILER")
// gets no "(default: ...)" after it.
TEST_F(BinariesManners, HelpSaysEachDefaultOnce) {
  for (const Binary& b : Binaries()) {
    SCOPED_TRACE(b.name);
    Proc help = Run(b.name, {"--help"});
    ASSERT_EQ(help.code, 0) << help.err;
    // One entry per flag: from "\n  --NAME" to the next.
    std::vector<std::string> entries = absl::StrSplit(help.out, "\n  --");
    for (size_t i = 1; i < entries.size(); ++i) {
      const std::string entry = absl::AsciiStrToLower(entries[i]);
      size_t defaults = 0;
      for (size_t at = entry.find("default:"); at != std::string::npos;
           at = entry.find("default:", at + 1)) {
        ++defaults;
      }
      EXPECT_LE(defaults, 1u) << "--" << entries[i];
    }
  }
}

// A store in a folder that does not exist is bad input naming the flag and the path; the folder
// is not created (systemd's StateDirectory or `spotdnn up` make the data folders).
TEST_F(BinariesManners, AStoreInAMissingFolderIsBadInputAndCreatesNothing) {
  const auto table = ReadmeExitTable();
  const std::string missing = dir_ + "/nonexistent/dir";
  for (const std::string name : {"spotdnn-profiler", "spotdnn-detector"}) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(table.contains(name));
    const int bad_input = StatusFor(table.at(name), "bad input");
    for (const std::string& flag :
         {"--db=" + missing + "/p.db", "--store=sqlite:" + missing + "/p.db"}) {
      Proc p = Run(name, {flag, "--listen=127.0.0.1:0"});
      EXPECT_EQ(p.code, bad_input) << p.err;
      EXPECT_THAT(p.err, HasSubstr(flag.substr(0, flag.find('='))));
      EXPECT_THAT(p.err, HasSubstr(missing));
      EXPECT_FALSE(fs::exists(dir_ + "/nonexistent")) << flag;
    }
  }
}

// A server given an address another one already listens on exits with the README's status for
// it (1), naming the address, instead of sharing the port (gRPC and cpp-httplib set SO_REUSEPORT
// by default, with which the kernel would split the connections between the two). The first one
// is started on port 0, which keeps working.
TEST_F(BinariesManners, AnAddressInUseIsRefusedNamingIt) {
  const auto table = ReadmeExitTable();
  struct Server {
    std::string name;
    std::vector<std::string> first;                            // on port 0
    std::function<std::vector<std::string>(int port)> second;  // on the first one's port
  };
  const std::string port_file = dir_ + "/port";
  auto grpc_server = [&](const std::string& name, bool store) {
    std::vector<std::string> first = {"--listen=127.0.0.1:0", "--port_file=" + port_file};
    if (store) first.push_back("--db=" + dir_ + "/" + name + "-first.db");
    return Server{name, first, [name, store, this](int port) {
                    std::vector<std::string> second = {absl::StrCat("--listen=127.0.0.1:", port)};
                    if (store) second.push_back("--db=" + dir_ + "/" + name + "-second.db");
                    return second;
                  }};
  };
  const std::vector<Server> servers = {
      grpc_server("spotdnn-predictor", false),
      grpc_server("spotdnn-provisioner", false),
      grpc_server("spotdnn-profiler", true),
      grpc_server("spotdnn-detector", true),
      {"spotdnn-metadata-emulator",
       {"--port=0", "--port_file=" + port_file},
       [](int port) { return std::vector<std::string>{absl::StrCat("--port=", port)}; }},
  };
  for (const Server& server : servers) {
    SCOPED_TRACE(server.name);
    ASSERT_TRUE(table.contains(server.name));
    const int in_use = StatusFor(table.at(server.name), "address in use");
    EXPECT_EQ(in_use, 1) << "the README's table says no status for an address in use";
    fs::remove(port_file);
    const pid_t first = Spawn(server.name, server.first, dir_ + "/.first");
    int port = 0;
    for (int i = 0; i < 500 && port == 0; ++i) {
      std::string text = ReadAll(port_file);
      if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &port)) port = 0;
      if (port == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (port == 0) {
      kill(first, SIGKILL);
      waitpid(first, nullptr, 0);
      FAIL() << "the first server wrote no port within 10 s: " << ReadAll(dir_ + "/.first");
    }
    Proc second = Run(server.name, server.second(port));
    kill(first, SIGTERM);
    int status = 0;
    waitpid(first, &status, 0);
    EXPECT_EQ(second.code, in_use) << second.err;
    EXPECT_THAT(second.err, HasSubstr(absl::StrCat("127.0.0.1:", port)));
    EXPECT_THAT(second.err, HasSubstr("in use"));
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "the first server did not stop cleanly: " << ReadAll(dir_ + "/.first");
  }
}

// The agent's command stays after "--"; a stray argument before it is still bad input.
TEST_F(BinariesManners, AgentTakesItsCommandAfterDoubleDash) {
  Proc stray = Run("spotdnn-agent", {"--cloud=aws", "true"});
  EXPECT_EQ(stray.code, 2) << stray.err;
  EXPECT_THAT(stray.err, HasSubstr("unexpected argument \"true\""));
}

}  // namespace
