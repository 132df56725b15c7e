#include "services/gateway/cli/cli.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
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

// The subcommand names of group `name` ("import, fit, ...").
std::string SubcommandNames(const std::string& group) {
  std::vector<std::string> names;
  for (const Command& c : CommandTable()) {
    if (absl::StartsWith(c.name, group + " ")) names.push_back(c.name.substr(group.size() + 1));
  }
  return absl::StrJoin(names, ", ");
}

bool IsHelp(const std::string& arg) { return arg == "--help" || arg == "-h"; }

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
      err << "spotdnn help: unknown command \"" << topic << "\"\n\n" << Overview();
      return kExitBadInput;
    }
    out << HelpText(*command);
    return kExitOk;
  }
  const Command* command = Find(argv[0]);
  if (command == nullptr) {
    err << "spotdnn: unknown command \"" << argv[0] << "\"\n\n" << Overview();
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
      err << "spotdnn " << command->name << ": unknown subcommand \"" << argv[1] << "\" (expected "
          << SubcommandNames(command->name) << ")\n\n"
          << HelpText(*command);
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
      args = absl::InvalidArgumentError(
          absl::StrCat("missing argument: see `spotdnn ", command->name, " --help`"));
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
