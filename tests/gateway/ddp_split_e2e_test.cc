// A heterogeneous global-batch split, end to end with real DDP runs: bench/ddp_split/ddp_split.py
// in a short form runs the DDP example (deploy/examples/digits-ddp) under torchrun on two CPU
// "GPU types" (fast-cpu, and slow-cpu computing three times per step), imports the runs' sample
// lines with `spotdnn profile import`, fits and exports the profile, predicts the split of a
// global batch over one instance of each type, and runs the mixed cluster with that split and
// with the even one. This test reads what the script left behind and checks the facts that do not
// depend on timing (the timings themselves are the bench's): both types imported and fitted, the
// split favours the fast type and sums to the global batch, its predicted step is no slower than
// the even split's, and every step of the real runs trained the whole global batch.
//
// Needs /usr/bin/python3 with torch and sklearn (python3-torch, python3-sklearn) and torchrun;
// skipped without them. About 2 minutes on 2 cores.
#include <sqlite3.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace spotdnn::gateway {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr int kGlobalBatch = 2048;
constexpr int kSlowdown = 4;
constexpr int kSteps = 10;

std::string ReadAll(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

json ReadJson(const fs::path& path) {
  const std::string text = ReadAll(path);
  json doc = json::parse(text, nullptr, false);
  EXPECT_FALSE(doc.is_discarded()) << path << ": " << text;
  return doc;
}

// The key=value fields of every SPOTDNN_SAMPLE line in a log.
std::vector<std::map<std::string, std::string>> SampleLines(const fs::path& path) {
  std::vector<std::map<std::string, std::string>> out;
  std::istringstream in(ReadAll(path));
  std::string line;
  while (std::getline(in, line)) {
    const size_t at = line.find("SPOTDNN_SAMPLE");
    if (at == std::string::npos) continue;
    std::map<std::string, std::string> fields;
    for (absl::string_view token : absl::StrSplit(line.substr(at), ' ', absl::SkipEmpty())) {
      const size_t eq = token.find('=');
      if (eq != absl::string_view::npos) {
        fields[std::string(token.substr(0, eq))] = std::string(token.substr(eq + 1));
      }
    }
    out.push_back(std::move(fields));
  }
  return out;
}

// The GPU types of the samples stored in a profile database.
std::set<std::string> StoredGpuTypes(const fs::path& db_path) {
  std::set<std::string> types;
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(db_path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    ADD_FAILURE() << "cannot open " << db_path;
    sqlite3_close(db);
    return types;
  }
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v2(db, "SELECT DISTINCT gpu_type FROM samples", -1, &stmt, nullptr) ==
      SQLITE_OK) {
    while (sqlite3_step(stmt) == SQLITE_ROW) {
      types.insert(reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0)));
    }
  } else {
    ADD_FAILURE() << sqlite3_errmsg(db);
  }
  sqlite3_finalize(stmt);
  sqlite3_close(db);
  return types;
}

TEST(DdpSplitEndToEnd, MeasuredTypesSplitTheGlobalBatchBySpeed) {
  if (std::system("/usr/bin/python3 -c 'import torch, sklearn, torch.distributed.run' "
                  ">/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "/usr/bin/python3 cannot import torch and sklearn (python3-torch, "
                    "python3-sklearn)";
  }
  const fs::path work = fs::temp_directory_path() / absl::StrCat("spotdnn-ddp-split-", getpid());
  fs::remove_all(work);
  const std::string script =
      (fs::path(SPOTDNN_SOURCE_DIR) / "bench" / "ddp_split" / "ddp_split.py").string();
  const std::string command = absl::StrCat(
      "/usr/bin/python3 ", script, " --spotdnn ", SPOTDNN_BINARY_DIR, "/spotdnn --work ",
      work.string(), " --global-batch ", kGlobalBatch, " --slowdown ", kSlowdown,
      " --profile-batches 256,2048 --profile-steps 10 --steps ", kSteps, " --warmup 2 --json > ",
      (work / "out.json").string(), " 2> ", (work / "err.txt").string());
  fs::create_directories(work);
  ASSERT_EQ(std::system(command.c_str()), 0) << command << "\n" << ReadAll(work / "err.txt");
  const fs::path run = work / absl::StrCat("slowdown-", kSlowdown);

  // The profile runs' samples are stored with both GPU types.
  EXPECT_EQ(StoredGpuTypes(run / "profiles.db"), (std::set<std::string>{"fast-cpu", "slow-cpu"}));

  // The fit has an all-reduce model of each type, with a per-sample compute.
  const json fit = ReadJson(run / "fit.json");
  std::map<std::string, json> models;
  for (const json& m : fit["profile"]["allreduce"]) models[m["gpu_type"].get<std::string>()] = m;
  ASSERT_EQ(models.size(), 2u) << fit.dump();
  ASSERT_TRUE(models.count("fast-cpu") && models.count("slow-cpu")) << fit.dump();
  EXPECT_EQ(fit["profile"]["sync"], "allreduce");

  // The split: the slow type gets the smaller batch, the two make the global batch, and its
  // predicted step is no slower than the even split's.
  const json split = ReadJson(run / "predict-split.json");
  const json even = ReadJson(run / "predict-even.json");
  const double fast = split["local_batches"]["fast"].get<double>();
  const double slow = split["local_batches"]["slow"].get<double>();
  EXPECT_LT(slow, fast) << split.dump();
  EXPECT_EQ(fast + slow, kGlobalBatch) << split.dump();
  EXPECT_EQ(split["global_batch"].get<int>(), kGlobalBatch);
  EXPECT_LE(split["iteration_time_s"].get<double>(), even["iteration_time_s"].get<double>())
      << split.dump() << "\n"
      << even.dump();

  // The real mixed runs: every step of both ranks trained the global batch, with the split's
  // local batches (the fast instance is rank 0).
  for (const std::string name : {"split", "even"}) {
    SCOPED_TRACE(name);
    const auto lines = SampleLines(run / "logs" / absl::StrCat("run-", name, ".log"));
    std::map<int, std::map<std::string, int>> batch_by_step;  // step -> worker -> local batch
    for (const auto& s : lines) {
      EXPECT_EQ(s.at("metric.global_batch"), absl::StrCat(kGlobalBatch));
      EXPECT_EQ(s.at("ranks"), "2");
      EXPECT_EQ(s.at("instances"), "2");
      int step = 0, local = 0;
      ASSERT_TRUE(absl::SimpleAtoi(s.at("step"), &step));
      ASSERT_TRUE(absl::SimpleAtoi(s.at("local_batch"), &local));
      batch_by_step[step][s.at("worker_id")] = local;
    }
    ASSERT_EQ(batch_by_step.size(), static_cast<size_t>(kSteps));
    for (const auto& [step, workers] : batch_by_step) {
      ASSERT_EQ(workers.size(), 2u) << "step " << step;
      EXPECT_EQ(workers.begin()->second + workers.rbegin()->second, kGlobalBatch);
      if (name == "split") {
        EXPECT_EQ(workers.at("rank0"), static_cast<int>(fast)) << "step " << step;
        EXPECT_EQ(workers.at("rank1"), static_cast<int>(slow)) << "step " << step;
      }
    }
  }
  fs::remove_all(work);
}

}  // namespace
}  // namespace spotdnn::gateway
