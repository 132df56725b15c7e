#include "services/gateway/cli/cli.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "services/common/program.h"
#include "services/gateway/cli/command.h"
#include "services/gateway/cli/output.h"
#include "services/gateway/cli/security_options.h"

#ifndef SPOTDNN_VERSION
#define SPOTDNN_VERSION "unknown"
#endif

namespace spotdnn::gateway {
namespace {

constexpr char kOverviewHead[] =
    R"(spotdnn — train deep networks on spot instances to a deadline and a loss

Usage: spotdnn COMMAND [FLAGS]

Commands:
)";

constexpr char kOverviewFoot[] = R"(
`spotdnn help COMMAND` (or `spotdnn COMMAND --help`) shows a command's flags. Every command
takes --json (one JSON object on stdout). Exit status: 0 ok, 1 service failure, 2 bad input,
3 infeasible SLO.

TLS and tokens, for any command that talks to a server: --tls-ca FILE (verify the server),
--tls-cert FILE --tls-key FILE (mutual TLS), --token-file FILE (bearer token); defaults from
$SPOTDNN_TLS_CA, $SPOTDNN_TLS_CERT, $SPOTDNN_TLS_KEY, $SPOTDNN_TOKEN_FILE.

Manual: README.md, and a page per topic in docs/ (its "Where to read next" lists them)
)";

std::string Overview() {
  std::string text = kOverviewHead;
  for (const Command& c : CommandTable()) {
    if (c.name.find(' ') != std::string::npos) continue;  // subcommands: in their group's help
    std::string name = c.name;
    name.resize(std::max<size_t>(name.size(), 12), ' ');
    absl::StrAppend(&text, "  ", name, c.summary, "\n");
  }
  absl::StrAppend(&text, "  ", "help        this text, or a command's\n", kOverviewFoot);
  return text;
}

const Command* Find(const std::string& name) {
  for (const Command& c : CommandTable()) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

bool IsHelp(const std::string& arg) { return arg == "--help" || arg == "-h"; }

// One line for a command name no command has, with the nearest one when it looks like a typo:
// "unknown command \"plann\"; did you mean \"plan\"?". `group` is "" for a command, the group's
// name for a subcommand ("local").
std::string UnknownCommandMessage(const std::string& typed, const std::string& group) {
  std::vector<std::string> names;
  for (const Command& c : CommandTable()) {
    if (group.empty() ? c.name.find(' ') == std::string::npos
                      : absl::StartsWith(c.name, group + " ")) {
      names.push_back(group.empty() ? c.name : c.name.substr(group.size() + 1));
    }
  }
  if (group.empty()) names.insert(names.end(), {"help", "version"});
  const std::string nearest = services::NearestName(typed, names);
  const std::string what = group.empty() ? "command" : "subcommand";
  std::string message = absl::StrCat("unknown ", what, " \"", typed, "\"");
  if (!nearest.empty()) {
    absl::StrAppend(&message, "; did you mean \"", nearest, "\"?");
  } else if (group.empty()) {
    absl::StrAppend(&message, "; `spotdnn help` lists the commands");
  } else {
    absl::StrAppend(&message, " (expected ", absl::StrJoin(names, ", "), ")");
  }
  return message;
}

// The names of a command's required arguments, from its synopsis' leading words in capitals
// ("INSTANCE [--notice 10s] ..." -> INSTANCE), for the message that one is missing.
std::string RequiredArguments(const Command& command) {
  std::vector<std::string> names;
  for (absl::string_view word :
       absl::StrSplit(command.synopsis, absl::ByAnyChar(" \n"), absl::SkipEmpty())) {
    // A placeholder: capitals first ("PATH|-", "INSTANCE..."); a flag or "[" ends them.
    if (!absl::ascii_isupper(word[0]) || !std::all_of(word.begin(), word.end(), [](char c) {
          return absl::ascii_isupper(c) || absl::ascii_isdigit(c) || c == '_' || c == '.' ||
                 c == '|' || c == '-';
        })) {
      break;
    }
    names.emplace_back(word);
  }
  return absl::StrJoin(names, " ");
}

}  // namespace

// A workload named on the command line: a file goes inline, a name is resolved by the service.
absl::StatusOr<pb::WorkloadRef> WorkloadRefFor(const std::string& arg,
                                               const services::DataRegistry& local) {
  pb::WorkloadRef ref;
  if (services::LooksLikePath(arg)) {
    auto profile = local.ResolveWorkload(arg);
    if (!profile.ok()) return profile.status();
    *ref.mutable_profile() = *std::move(profile);
  } else {
    ref.set_name(arg);
  }
  return ref;
}

absl::StatusOr<pb::CatalogRef> CatalogRefFor(const std::string& arg,
                                             const services::DataRegistry& local) {
  pb::CatalogRef ref;
  if (services::LooksLikePath(arg)) {
    auto catalog = local.ResolveCatalog(arg);
    if (!catalog.ok()) return catalog.status();
    *ref.mutable_catalog() = *std::move(catalog);
  } else {
    ref.set_name(arg);
  }
  return ref;
}

int ReportError(const absl::Status& status, absl::string_view command, const Io& io) {
  io.err << "spotdnn " << command << ": " << absl::StatusCodeToString(status.code()) << ": "
         << status.message() << "\n";
  if (io.json) {
    io.out << "{\"error\":{\"code\":" << JsonString(absl::StatusCodeToString(status.code()))
           << ",\"message\":" << JsonString(std::string(status.message())) << "}}\n";
  }
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kAlreadyExists:
      return kExitBadInput;
    default:
      return kExitFailure;
  }
}

int RunCli(const std::vector<std::string>& raw_argv, std::ostream& out, std::ostream& err) {
  // The security options apply to every command's channels; the commands never see them.
  std::vector<std::string> argv = raw_argv;
  if (absl::Status s = ApplySecurityOptions(argv); !s.ok()) {
    err << "spotdnn: " << s.message() << "\n";
    return kExitBadInput;
  }
  if (argv.empty()) {
    err << Overview();
    return kExitBadInput;
  }
  if (IsHelp(argv[0])) {
    out << Overview();
    return kExitOk;
  }
  if (argv[0] == "--version" || argv[0] == "version") {
    out << "spotdnn " << SPOTDNN_VERSION << "\n";
    return kExitOk;
  }
  if (argv[0] == "help") {
    if (argv.size() == 1) {
      out << Overview();
      return kExitOk;
    }
    const std::string topic = absl::StrJoin(argv.begin() + 1, argv.end(), " ");
    const Command* command = Find(topic);
    if (command == nullptr) {
      const Command* group = argv.size() > 2 ? Find(argv[1]) : nullptr;
      err << "spotdnn help: "
          << (group != nullptr && !group->run ? UnknownCommandMessage(argv[2], group->name)
                                              : UnknownCommandMessage(topic, ""))
          << "\n";
      return kExitBadInput;
    }
    out << HelpText(*command);
    return kExitOk;
  }
  const Command* command = Find(argv[0]);
  if (command == nullptr) {
    // One line, not the whole overview: the typo and its fix stay on the screen.
    err << "spotdnn: " << UnknownCommandMessage(argv[0], "") << "\n";
    return kExitBadInput;
  }
  size_t consumed = 1;
  if (!command->run) {  // a group: the subcommand comes next
    if (argv.size() < 2 || IsHelp(argv[1])) {
      (argv.size() < 2 ? err : out) << HelpText(*command);
      return argv.size() < 2 ? kExitBadInput : kExitOk;
    }
    const Command* sub = Find(command->name + " " + argv[1]);
    if (sub == nullptr) {
      err << "spotdnn " << command->name << ": " << UnknownCommandMessage(argv[1], command->name)
          << "\n";
      return kExitBadInput;
    }
    command = sub;
    consumed = 2;
  }
  const std::vector<std::string> rest(argv.begin() + consumed, argv.end());
  if (std::any_of(rest.begin(), rest.end(), IsHelp)) {
    out << HelpText(*command);
    return kExitOk;
  }
  Io io{out, err, std::find(rest.begin(), rest.end(), "--json") != rest.end()};
  FlagSpec spec{.switches = {"--json"}};
  for (const FlagHelp& f : command->flags) {
    (f.value.empty() ? spec.switches : spec.values).insert(f.flag);
  }
  auto args = Args::Parse(rest, spec);
  if (args.ok()) {
    const int given = static_cast<int>(args->positional().size());
    if (command->max_positional >= 0 && given > command->max_positional) {
      args = absl::InvalidArgumentError(absl::StrCat(
          "unexpected argument \"", args->positional()[command->max_positional], "\""));
    } else if (given < command->min_positional) {
      // The hint to see --help follows below: the message names what is missing.
      const std::string missing = RequiredArguments(*command);
      args =
          absl::InvalidArgumentError(missing.empty() ? std::string("missing argument")
                                                     : absl::StrCat("missing argument ", missing));
    }
  }
  if (!args.ok()) {
    ReportError(args.status(), command->name, io);
    // One line of hint, not the whole help: the error stays the last thing on the screen.
    if (!io.json) err << "See `spotdnn " << command->name << " --help`.\n";
    return kExitBadInput;
  }
  return command->run(*args, io);
}

}  // namespace spotdnn::gateway
