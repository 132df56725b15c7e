// The start-up script a GCE or Azure VM runs, run here with bash: the SPOTDNN_* environment the
// command gets and the agent's command line; the names and request ids derived from tokens.
#include "provisioner/launcher/vm_script.h"

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace spotdnn::launcher {
namespace {

using ::testing::HasSubstr;

std::string ReadWhenThere(const std::string& path) {
  for (int i = 0; i < 250; ++i) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    if (in && !text.str().empty()) return text.str();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return "";
}

TEST(VmStartupScriptTest, RunsTheCommandUnderTheAgentWithTheEnvironment) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(::testing::TempDir()) / "vm-script";
  fs::remove_all(dir);
  fs::create_directories(dir / "bin");
  fs::create_directories(dir / "logs");
  {
    std::ofstream agent(dir / "bin" / "spotdnn-agent");
    // Like the real agent: records its flags, then runs what follows "--".
    agent << "#!/bin/sh\nprintf '%s\\n' \"$@\" > " << (dir / "agent-args").string()
          << "\nwhile [ \"$1\" != -- ]; do shift; done\nshift\nexec \"$@\"\n";
  }
  fs::permissions(dir / "bin" / "spotdnn-agent", fs::perms::owner_all);
  LaunchRequest request{
      .job_id = "job-7",
      .instance_type = "n1-standard-8+nvidia-tesla-v100:1",
      .count = 1,
      .role = Role::kParameterServer,
      .command = "env > " + (dir / "env").string() + "; echo it\\'s done",
      .ps_addresses = {"10.0.0.2:2222"},
      .extra_env = {{"SPOTDNN_DETECTOR", "10.0.0.9:50054"}, {"SPOTDNN_PS_PORT", "2222"}}};
  const std::string script =
      VmStartupScript(request, 0, "spotdnn-abc-0",
                      {.cloud = "gce",
                       .metadata_url = "http://metadata.google.internal",
                       .agent_command = "spotdnn-agent --cloud=gce --instance_id=%INSTANCE_ID% "
                                        "--job_id=%JOB_ID%"});
  std::ofstream(dir / "script.sh") << script;
  const std::string run = "env PATH=" + (dir / "bin").string() +
                          ":$PATH SPOTDNN_CLOUD_METADATA_URL=http://127.0.0.1:9/i/spotdnn-abc-0 "
                          "SPOTDNN_LOG_DIR=" +
                          (dir / "logs").string() + " bash " + (dir / "script.sh").string();
  ASSERT_EQ(std::system(run.c_str()), 0);

  const std::string env = ReadWhenThere((dir / "env").string());
  EXPECT_THAT(env, HasSubstr("SPOTDNN_JOB_ID=job-7\n"));
  EXPECT_THAT(env, HasSubstr("SPOTDNN_ROLE=ps\n"));
  EXPECT_THAT(env, HasSubstr("SPOTDNN_INDEX=0\n"));
  EXPECT_THAT(env, HasSubstr("SPOTDNN_INSTANCE_ID=spotdnn-abc-0\n"));
  EXPECT_THAT(env, HasSubstr("SPOTDNN_PS_PORT=2222\n"));
  EXPECT_THAT(env, HasSubstr("SPOTDNN_PS_ADDRESSES=10.0.0.2:2222\n"));
  EXPECT_THAT(env, HasSubstr("SPOTDNN_INSTANCE_TYPE=n1-standard-8+nvidia-tesla-v100:1\n"));
  EXPECT_THAT(env, HasSubstr("SPOTDNN_METADATA_ENDPOINT=http://127.0.0.1:9/i/spotdnn-abc-0\n"));
  EXPECT_THAT(ReadWhenThere((dir / "logs" / "spotdnn-ps.log").string()), HasSubstr("it's done"));
  const std::string args = ReadWhenThere((dir / "agent-args").string());
  EXPECT_EQ(args,
            "--cloud=gce\n--instance_id=spotdnn-abc-0\n--job_id=job-7\n"
            "--metadata_endpoint=http://127.0.0.1:9/i/spotdnn-abc-0\n"
            "--detector=10.0.0.9:50054\n--\n/bin/bash\n-c\n" +
                request.command + "\n");
  // Without the override the agent polls the cloud's own metadata server.
  EXPECT_THAT(script, HasSubstr("${SPOTDNN_CLOUD_METADATA_URL:-http://metadata.google.internal}"));
}

TEST(VmNamesTest, StemsAndRequestIdsAreDeterministicAndValid) {
  const std::string stem = LaunchNameStem("job-42-w-n1-standard-8");
  EXPECT_EQ(stem, LaunchNameStem("job-42-w-n1-standard-8"));
  EXPECT_NE(stem, LaunchNameStem("job-42-w-n1-standard-16"));
  EXPECT_TRUE(std::regex_match(stem + "-17", std::regex("[a-z]([-a-z0-9]{0,61}[a-z0-9])?")));
  const std::string id = DeterministicUuid("p/z/n");
  EXPECT_EQ(id, DeterministicUuid("p/z/n"));
  EXPECT_NE(id, DeterministicUuid("p/z/m"));
  EXPECT_TRUE(std::regex_match(
      id, std::regex("[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")))
      << id;
}

}  // namespace
}  // namespace spotdnn::launcher
