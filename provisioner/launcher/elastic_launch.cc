#include "provisioner/launcher/elastic_launch.h"

#include <cctype>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "provisioner/launcher/vm_script.h"

namespace spotdnn::launcher {
namespace {

absl::Status Bad(absl::string_view field, absl::string_view value, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(field, " = \"", value, "\": ", why));
}

// python, python3, python3.11, /usr/bin/python3, ...: an interpreter torchrun stands in for.
bool IsPython(absl::string_view word) {
  const size_t slash = word.rfind('/');
  absl::string_view name = slash == absl::string_view::npos ? word : word.substr(slash + 1);
  if (!absl::ConsumePrefix(&name, "python")) return false;
  for (char c : name) {
    if (!std::isdigit(static_cast<unsigned char>(c)) && c != '.') return false;
  }
  return true;
}

// HOST:PORT with a port from 1 to 65535 (an IPv6 host in brackets).
bool ValidEndpoint(absl::string_view endpoint) {
  const size_t colon = endpoint.rfind(':');
  if (colon == absl::string_view::npos || colon == 0) return false;
  int port = 0;
  if (!absl::SimpleAtoi(endpoint.substr(colon + 1), &port) || port < 1 || port > 65535) {
    return false;
  }
  for (char c : endpoint.substr(0, colon)) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_' ||
          c == ':' || c == '[' || c == ']')) {
      return false;
    }
  }
  return true;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> SplitCommandWords(absl::string_view field,
                                                           absl::string_view command) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;
  for (size_t i = 0; i < command.size(); ++i) {
    const char c = command[i];
    if (c == '\'') {
      const size_t end = command.find('\'', i + 1);
      if (end == absl::string_view::npos) return Bad(field, command, "a quote is not closed");
      absl::StrAppend(&word, command.substr(i + 1, end - i - 1));
      in_word = true;
      i = end;
    } else if (c == '"') {
      size_t j = i + 1;
      for (; j < command.size() && command[j] != '"'; ++j) {
        if (command[j] == '$' || command[j] == '`') {
          return Bad(field, command,
                     "expansions ($, `) are shell syntax: torchrun runs one program and its "
                     "arguments on every rank (put the logic in the script)");
        }
        if (command[j] == '\\' && j + 1 < command.size() &&
            (command[j + 1] == '"' || command[j + 1] == '\\')) {
          ++j;
        }
        word.push_back(command[j]);
      }
      if (j >= command.size()) return Bad(field, command, "a quote is not closed");
      in_word = true;
      i = j;
    } else if (c == '\\') {
      if (i + 1 >= command.size()) return Bad(field, command, "ends with a backslash");
      word.push_back(command[++i]);
      in_word = true;
    } else if (c == ' ' || c == '\t') {
      if (in_word) words.push_back(std::move(word));
      word.clear();
      in_word = false;
    } else if (absl::string_view(";|&<>$`()\n").find(c) != absl::string_view::npos) {
      return Bad(field, command,
                 absl::StrCat("'", std::string(1, c == '\n' ? ' ' : c),
                              "' is shell syntax: torchrun runs one program and its arguments "
                              "on every rank (put the logic in the script)"));
    } else {
      word.push_back(c);
      in_word = true;
    }
  }
  if (in_word) words.push_back(std::move(word));
  if (words.empty()) return Bad(field, command, "expected the training script and its arguments");
  return words;
}

absl::StatusOr<std::string> ElasticLaunchCommand(const ElasticLaunchOptions& options) {
  if (options.job_id.empty()) return Bad("job_id", "", "required (the rendezvous id)");
  if (!ValidEndpoint(options.rendezvous)) {
    return Bad("rendezvous", options.rendezvous, "expected HOST:PORT with a port from 1 to 65535");
  }
  if (options.min_instances < 1) {
    return Bad("min_instances", absl::StrCat(options.min_instances), "must be at least 1");
  }
  if (options.max_instances < options.min_instances) {
    return Bad("max_instances", absl::StrCat(options.max_instances),
               absl::StrCat("must be at least min_instances (", options.min_instances, ")"));
  }
  if (options.procs_per_instance < 0) {
    return Bad("procs_per_instance", absl::StrCat(options.procs_per_instance),
               "must be at least 1 (0: from $SPOTDNN_PROCS_PER_INSTANCE)");
  }
  if (options.max_restarts < 0) {
    return Bad("max_restarts", absl::StrCat(options.max_restarts), "must not be negative");
  }
  if (options.join_timeout_s < 1) {
    return Bad("join_timeout_s", absl::StrCat(options.join_timeout_s), "must be at least 1");
  }
  if (options.last_call_timeout_s < 1) {
    return Bad("last_call_timeout_s", absl::StrCat(options.last_call_timeout_s),
               "must be at least 1");
  }
  auto words = SplitCommandWords("commands.worker", options.script);
  if (!words.ok()) return words.status();

  std::string python = "python3";
  std::vector<std::string> program;  // what follows torchrun's own arguments
  size_t first = 0;
  if (IsPython((*words)[0])) {
    python = (*words)[0];
    first = 1;
    if (words->size() < 2) {
      return Bad("commands.worker", options.script, "names an interpreter but no script");
    }
    if ((*words)[1] == "-m") {
      if (words->size() < 3) return Bad("commands.worker", options.script, "-m needs a module");
      program.push_back("--module");
      first = 2;
    } else if (absl::StartsWith((*words)[1], "-")) {
      return Bad("commands.worker", options.script,
                 absl::StrCat("the interpreter's option ", (*words)[1],
                              " cannot pass through torchrun: give the script (or -m MODULE) "
                              "right after the interpreter"));
    }
  } else if (!absl::EndsWith((*words)[0], ".py")) {
    program.push_back("--no_python");  // an executable: torchrun runs it as it is
  }
  for (size_t i = first; i < words->size(); ++i) program.push_back(ShellQuote((*words)[i]));

  const std::string log_dir =
      options.log_dir.empty()
          ? "\"${TMPDIR:-/tmp}/spotdnn-torchrun-${SPOTDNN_INSTANCE_ID:-instance}\""
          : ShellQuote(options.log_dir);
  const std::string args = absl::StrCat(
      "--nnodes=", options.min_instances, ":", options.max_instances, " --nproc_per_node=",
      options.procs_per_instance > 0 ? absl::StrCat(options.procs_per_instance)
                                     : std::string("\"${SPOTDNN_PROCS_PER_INSTANCE:-1}\""),
      " --rdzv_backend=c10d --rdzv_endpoint=", ShellQuote(options.rendezvous),
      " --rdzv_id=", ShellQuote(options.job_id),
      " --rdzv_conf=is_host=false,join_timeout=", options.join_timeout_s,
      ",last_call_timeout=", options.last_call_timeout_s, " --max_restarts=", options.max_restarts,
      " --redirects 1 --tee 1 --log_dir ", log_dir, " ", absl::StrJoin(program, " "));
  return absl::StrCat("if command -v torchrun >/dev/null 2>&1; then set -- torchrun; else set -- ",
                      ShellQuote(python), " -m torch.distributed.run; fi; exec \"$@\" ", args);
}

absl::StatusOr<ClusterLaunchRequest> ElasticClusterRequest(const ElasticCluster& cluster) {
  ElasticLaunchOptions launch = cluster.launch;
  launch.procs_per_instance = 0;  // each group's, from its environment
  auto command = ElasticLaunchCommand(launch);
  if (!command.ok()) return command.status();
  if (cluster.global_batch < 0) {
    return Bad("global_batch", absl::StrCat(cluster.global_batch), "must not be negative");
  }
  if (cluster.accumulation_steps < 1) {
    return Bad("accumulation_steps", absl::StrCat(cluster.accumulation_steps),
               "must be at least 1");
  }
  ClusterLaunchRequest request{.job_id = launch.job_id,
                               .command = *command,
                               .parameter_servers = 0,
                               .worker_token_prefix = cluster.worker_token_prefix,
                               .extra_env = cluster.extra_env};
  request.extra_env["SPOTDNN_SYNC"] = "allreduce";
  request.extra_env["SPOTDNN_RENDEZVOUS"] = launch.rendezvous;
  request.extra_env["SPOTDNN_MIN_INSTANCES"] = absl::StrCat(launch.min_instances);
  request.extra_env["SPOTDNN_MAX_INSTANCES"] = absl::StrCat(launch.max_instances);
  request.extra_env["SPOTDNN_ACCUMULATION_STEPS"] = absl::StrCat(cluster.accumulation_steps);
  if (cluster.global_batch > 0) {
    request.extra_env["SPOTDNN_GLOBAL_BATCH"] = absl::StrCat(cluster.global_batch);
  }
  for (const ElasticGroup& g : cluster.groups) {
    const std::string field = absl::StrCat("groups[", g.instance_type, "]");
    if (g.procs_per_instance < 1) {
      return Bad(field + ".procs_per_instance", absl::StrCat(g.procs_per_instance),
                 "must be at least 1");
    }
    if (g.local_batch < 0) {
      return Bad(field + ".local_batch", absl::StrCat(g.local_batch), "must not be negative");
    }
    WorkerGroup group{.instance_type = g.instance_type,
                      .count = g.count,
                      .first_index = g.first_index,
                      .batch_size = g.local_batch * g.procs_per_instance,
                      .market = g.market};
    group.env["SPOTDNN_PROCS_PER_INSTANCE"] = absl::StrCat(g.procs_per_instance);
    if (g.local_batch > 0) group.env["SPOTDNN_LOCAL_BATCH"] = absl::StrCat(g.local_batch);
    request.workers.push_back(std::move(group));
  }
  return request;
}

}  // namespace spotdnn::launcher
