// Checks that deploy/ agrees with itself and with the programs: the Kubernetes manifests, the
// systemd units and the container files name the same images, ports, flags, data and binaries.
#include <unistd.h>

#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/db/database.h"
#include "gtest/gtest.h"
#include "tests/deploy/deploy_files.h"

namespace spotdnn::deploy_test {
namespace {

namespace fs = std::filesystem;

const std::string kSourceDir = SPOTDNN_SOURCE_DIR;
const std::string kBinaryDir = SPOTDNN_BINARY_DIR;
// deploy/k8s renders base/ (the services, on a database of the user's); deploy/k8s/dev adds a
// PostgreSQL of its own and the profiler on it.
const std::string kK8sTopDir = kSourceDir + "/deploy/k8s";
const std::string kK8sDir = kK8sTopDir + "/base";
const std::string kK8sDevDir = kK8sTopDir + "/dev";
const std::string kExampleSecret = kK8sTopDir + "/examples/spotdnn-postgres-secret.yaml";
const std::string kProfilerPostgresPatch =
    kK8sTopDir + "/components/profiler-postgres/profiler-store.yaml";
// The Secret naming the database (keys "store" and "password").
const std::string kStoreSecret = "spotdnn-postgres";
const std::string kUnitDir = kSourceDir + "/deploy/systemd";
const std::string kDockerfile = kSourceDir + "/deploy/container/Dockerfile";

// The services, each with a --listen flag, and the programs the image and the install carry.
const std::set<std::string> kServices = {"spotdnn-predictor", "spotdnn-provisioner",
                                         "spotdnn-profiler", "spotdnn-detector"};
const std::set<std::string> kImagePrograms = {
    "spotdnn",          "spotdnn-predictor", "spotdnn-provisioner",
    "spotdnn-profiler", "spotdnn-detector",  "spotdnn-agent"};

// The ConfigMaps generated from deploy/<folder>/*.json by deploy/k8s/update-configmaps.sh.
const std::map<std::string, std::string> kDataConfigMaps = {{"spotdnn-catalogs", "catalogs"},
                                                            {"spotdnn-workloads", "workloads"}};

// The `key` list of the kustomization.yaml in `dir` (resources, components).
std::vector<std::string> KustomizationList(const std::string& dir, const std::string& key) {
  std::vector<std::string> items;
  try {
    const YAML::Node k = YAML::LoadFile(dir + "/kustomization.yaml");
    for (const auto& r : At(k, {key})) items.push_back(r.as<std::string>());
  } catch (const YAML::Exception& e) {
    ADD_FAILURE() << dir << "/kustomization.yaml: " << e.what();
  }
  return items;
}

std::vector<std::string> KustomizationResources() {
  return KustomizationList(kK8sDir, "resources");
}

// The objects of one manifest file (`shown` names it in messages).
std::vector<K8sObject> LoadManifestFile(const std::string& path, const std::string& shown) {
  std::vector<K8sObject> objects;
  try {
    for (const YAML::Node& doc : YAML::LoadAllFromFile(path)) {
      if (doc.IsNull()) continue;
      objects.push_back({shown, ScalarAt(doc, {"kind"}), ScalarAt(doc, {"metadata", "name"}), doc});
    }
  } catch (const YAML::Exception& e) {
    ADD_FAILURE() << path << ": YAML does not parse: " << e.what();
  }
  return objects;
}

// The objects of deploy/k8s/base, as its kustomization lists them.
std::vector<K8sObject> LoadManifests() {
  std::vector<K8sObject> objects;
  for (const std::string& file : KustomizationResources()) {
    for (K8sObject& o : LoadManifestFile(kK8sDir + "/" + file, file)) objects.push_back(o);
  }
  return objects;
}

const K8sObject* Find(const std::vector<K8sObject>& objects, const std::string& kind,
                      const std::string& name) {
  for (const K8sObject& o : objects) {
    if (o.kind == kind && o.name == name) return &o;
  }
  return nullptr;
}

bool IsWorkload(const K8sObject& o) { return o.kind == "Deployment" || o.kind == "StatefulSet"; }

// One container of a Deployment or StatefulSet and the command line it runs.
struct PodContainer {
  const K8sObject* workload;
  YAML::Node pod;  // spec.template
  YAML::Node container;
  std::vector<std::string> words;  // program and arguments; a shell script's `exec` line
  std::string program;             // file name of words[0]
  std::string Where() const {
    return absl::StrCat(workload->Where(), " container ", ScalarAt(container, {"name"}));
  }
};

std::vector<std::string> ContainerWords(const YAML::Node& container) {
  std::vector<std::string> words;
  for (const char* key : {"command", "args"}) {
    for (const auto& w : At(container, {key})) words.push_back(w.as<std::string>());
  }
  if (words.size() >= 3 && words[0] == "/bin/sh" && words[1] == "-c") {
    // The script ends by exec'ing the program; its flags are on that line.
    for (absl::string_view line : absl::StrSplit(words[2], '\n')) {
      line = absl::StripLeadingAsciiWhitespace(line);
      if (absl::ConsumePrefix(&line, "exec ")) return SplitWords(std::string(line));
    }
  }
  return words;
}

// PodContainer points into `objects`, which must outlive the result.
std::vector<PodContainer> Containers(std::vector<K8sObject>&& objects) = delete;
std::vector<PodContainer> Containers(const std::vector<K8sObject>& objects) {
  std::vector<PodContainer> result;
  for (const K8sObject& o : objects) {
    if (!IsWorkload(o)) continue;
    const YAML::Node pod = At(o.node, {"spec", "template"});
    for (const auto& c : At(pod, {"spec", "containers"})) {
      PodContainer pc{&o, pod, c, ContainerWords(c), ""};
      if (!pc.words.empty()) pc.program = fs::path(pc.words[0]).filename().string();
      result.push_back(pc);
    }
  }
  return result;
}

bool Selects(const std::map<std::string, std::string>& selector,
             const std::map<std::string, std::string>& labels) {
  if (selector.empty()) return false;
  for (const auto& [k, v] : selector) {
    auto it = labels.find(k);
    if (it == labels.end() || it->second != v) return false;
  }
  return true;
}

// The flags of `program` in the build folder, run once per program.
const ProgramFlags& FlagsOfProgram(const std::string& program) {
  static std::map<std::string, ProgramFlags> cache;
  auto it = cache.find(program);
  if (it == cache.end()) it = cache.emplace(program, HelpFlags(kBinaryDir + "/" + program)).first;
  return it->second;
}

// The port of `program`'s default --listen (-1 when it has none).
int DefaultListenPort(const std::string& program) {
  const ProgramFlags& flags = FlagsOfProgram(program);
  auto it = flags.defaults.find("listen");
  return it == flags.defaults.end() ? -1 : PortOf(it->second);
}

// Checks that every flag in `words` is accepted by the program `program`; `where` names the file
// and object for the failure message.
void ExpectFlagsAccepted(const std::string& where, const std::string& program,
                         const std::vector<std::string>& words) {
  const ProgramFlags& known = FlagsOfProgram(program);
  ASSERT_TRUE(known.ran) << where << ": runs " << program << ", which is not a program in "
                         << kBinaryDir << " (or its --helpfull printed no flags)";
  for (const auto& [flag, value] : FlagsOf(words)) {
    if (known.defaults.count(flag) != 0) continue;
    ADD_FAILURE() << where << ": " << program << " has no flag --" << flag;
  }
}

std::string ImageTheContainerFilesBuild() {
  static const std::regex kImage(R"(image=\$\{IMAGE:-([^}]+)\})");
  const std::string script = ReadFile(kSourceDir + "/deploy/container/build.sh");
  std::smatch m;
  return std::regex_search(script, m, kImage) ? m[1].str() : "";
}

std::string ProjectVersion() {
  static const std::regex kVersion(R"(project\(spotdnn VERSION ([0-9.]+))");
  const std::string cmake = ReadFile(kSourceDir + "/CMakeLists.txt");
  std::smatch m;
  return std::regex_search(cmake, m, kVersion) ? m[1].str() : "";
}

std::set<std::string> FilesIn(const std::string& dir, const std::string& extension) {
  std::set<std::string> names;
  std::error_code ec;  // a missing folder has no files
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (entry.path().extension() == extension) names.insert(entry.path().filename().string());
  }
  return names;
}

// ---- Kubernetes ----

TEST(K8sManifests, KustomizationListsEveryManifestFile) {
  std::set<std::string> listed;
  for (const std::string& r : KustomizationResources()) {
    EXPECT_TRUE(listed.insert(r).second) << "kustomization.yaml: resource " << r << " twice";
    EXPECT_TRUE(fs::exists(kK8sDir + "/" + r))
        << "kustomization.yaml: resource " << r << " is not a file in deploy/k8s/base";
  }
  for (const std::string& file : FilesIn(kK8sDir, ".yaml")) {
    if (file == "kustomization.yaml") continue;
    EXPECT_EQ(listed.count(file), 1u)
        << "deploy/k8s/base/" << file << " is not in kustomization.yaml's resources";
  }
  // `kubectl apply -k deploy/k8s` is the base and nothing else (no example Secret, no dev server).
  EXPECT_EQ(KustomizationList(kK8sTopDir, "resources"), std::vector<std::string>{"base"})
      << "deploy/k8s/kustomization.yaml: resources";
  EXPECT_TRUE(FilesIn(kK8sTopDir, ".yaml") == std::set<std::string>{"kustomization.yaml"})
      << "deploy/k8s: manifests belong in base/, dev/, components/ or examples/";
  // The dev overlay: the base, its PostgreSQL, the profiler on it.
  const std::vector<std::string> dev = KustomizationList(kK8sDevDir, "resources");
  EXPECT_TRUE(std::set<std::string>(dev.begin(), dev.end()) ==
              std::set<std::string>({"../base", "postgres.yaml"}))
      << "deploy/k8s/dev/kustomization.yaml: resources should be ../base and postgres.yaml";
  EXPECT_EQ(KustomizationList(kK8sDevDir, "components"),
            std::vector<std::string>{"../components/profiler-postgres"})
      << "deploy/k8s/dev/kustomization.yaml: components";
}

// kustomize (in kubectl) renders the folder as `kubectl apply -k` would; it needs no cluster.
TEST(K8sManifests, KustomizeRendersThem) {
  if (RunCommand("kubectl version --client").exit_code != 0) {
    GTEST_SKIP() << "no kubectl here: kustomize rendering not checked";
  }
  const size_t base = LoadManifests().size();
  const size_t dev_server = LoadManifestFile(kK8sDevDir + "/postgres.yaml", "postgres.yaml").size();
  for (const auto& [dir, expected] : std::vector<std::pair<std::string, size_t>>{
           {kK8sTopDir, base}, {kK8sDir, base}, {kK8sDevDir, base + dev_server}}) {
    const CommandResult render = RunCommand("kubectl kustomize '" + dir + "'");
    ASSERT_EQ(render.exit_code, 0) << "kubectl kustomize " << dir << ":\n" << render.output;
    size_t rendered = 0;
    for (const YAML::Node& doc : YAML::LoadAll(render.output)) rendered += doc.IsMap() ? 1 : 0;
    EXPECT_EQ(rendered, expected) << "kubectl kustomize " << dir
                                  << " rendered another object count";
    if (dir != kK8sDevDir) continue;
    // The component put the profiler on the Secret's store.
    EXPECT_TRUE(absl::StrContains(render.output, "--store=$(SPOTDNN_PROFILER_STORE)"))
        << "kubectl kustomize deploy/k8s/dev: the profiler is not on the PostgreSQL store";
    EXPECT_FALSE(absl::StrContains(render.output, "--db=/var/lib/spotdnn/profiles.db"))
        << "kubectl kustomize deploy/k8s/dev: the profiler still has its SQLite --db";
  }
}

TEST(K8sManifests, EveryObjectIsNamedAndInTheNamespace) {
  const std::vector<K8sObject> objects = LoadManifests();
  ASSERT_FALSE(objects.empty());
  std::vector<std::string> namespaces;
  for (const K8sObject& o : objects) {
    if (o.kind == "Namespace") namespaces.push_back(o.name);
  }
  ASSERT_EQ(namespaces.size(), 1u) << "deploy/k8s should define exactly one Namespace";
  std::set<std::string> seen;
  for (const K8sObject& o : objects) {
    EXPECT_FALSE(ScalarAt(o.node, {"apiVersion"}).empty()) << o.Where() << ": no apiVersion";
    EXPECT_FALSE(o.kind.empty()) << o.file << ": an object has no kind";
    EXPECT_FALSE(o.name.empty()) << o.file << ": a " << o.kind << " has no metadata.name";
    EXPECT_TRUE(seen.insert(o.kind + "/" + o.name).second) << o.Where() << ": defined twice";
    if (o.kind != "Namespace") {
      EXPECT_EQ(ScalarAt(o.node, {"metadata", "namespace"}), namespaces[0])
          << o.Where() << ": metadata.namespace";
    }
  }
}

TEST(K8sManifests, ImagesAreTheOneTheContainerFilesBuild) {
  const std::string image = ImageTheContainerFilesBuild();
  ASSERT_FALSE(image.empty()) << "deploy/container/build.sh: no image=${IMAGE:-NAME:TAG} line";
  EXPECT_TRUE(absl::EndsWith(image, ":" + ProjectVersion()))
      << "deploy/container/build.sh: image " << image << " is not tagged with the project version "
      << ProjectVersion();
  const std::vector<K8sObject> objects = LoadManifests();
  const std::vector<PodContainer> containers = Containers(objects);
  ASSERT_FALSE(containers.empty());
  for (const PodContainer& c : containers) {
    EXPECT_EQ(ScalarAt(c.container, {"image"}), image) << c.Where() << ": image";
    EXPECT_EQ(kImagePrograms.count(c.program), 1u)
        << c.Where() << ": runs " << c.program << ", which the image does not carry";
  }
}

TEST(K8sManifests, ListenMetricsContainerProbeAndServicePortsAgree) {
  const std::vector<K8sObject> objects = LoadManifests();
  std::set<std::string> served;
  for (const PodContainer& c : Containers(objects)) {
    const std::optional<std::string> listen = FlagValue(c.words, "listen");
    if (!listen) continue;
    served.insert(c.program);
    const int port = PortOf(*listen);
    EXPECT_TRUE(absl::StartsWith(*listen, "0.0.0.0:"))
        << c.Where() << ": --listen=" << *listen << " is not reachable from other pods";
    EXPECT_EQ(port, DefaultListenPort(c.program))
        << c.Where() << ": --listen port differs from " << c.program << "'s default";
    const YAML::Node ports = At(c.container, {"ports"});
    ASSERT_EQ(ports.size(), 2u) << c.Where() << ": ports should list the gRPC and metrics ports";
    EXPECT_EQ(IntAt(ports[0], {"containerPort"}), port)
        << c.Where() << ": ports[0].containerPort differs from --listen=" << *listen;
    // Metrics: served on every address, named, and where the scrape annotations say.
    const std::optional<std::string> metrics = FlagValue(c.words, "metrics_listen");
    ASSERT_TRUE(metrics.has_value()) << c.Where() << ": no --metrics_listen";
    EXPECT_TRUE(absl::StartsWith(*metrics, "0.0.0.0:"))
        << c.Where() << ": --metrics_listen=" << *metrics << " is not reachable from Prometheus";
    EXPECT_EQ(ScalarAt(ports[1], {"name"}), "metrics") << c.Where() << ": ports[1].name";
    EXPECT_EQ(IntAt(ports[1], {"containerPort"}), PortOf(*metrics))
        << c.Where() << ": ports[1].containerPort differs from --metrics_listen=" << *metrics;
    auto annotations = StringMap(At(c.pod, {"metadata", "annotations"}));
    EXPECT_EQ(annotations["prometheus.io/scrape"], "true") << c.Where() << ": prometheus.io/scrape";
    EXPECT_EQ(annotations["prometheus.io/port"], std::to_string(PortOf(*metrics)))
        << c.Where() << ": prometheus.io/port differs from --metrics_listen=" << *metrics;
    const std::string port_name = ScalarAt(ports[0], {"name"});
    // Ready when its gRPC health says SERVING; alive by the same, or (the detector, whose health
    // follows the database) while it accepts connections.
    const YAML::Node ready = At(c.container, {"readinessProbe", "grpc"});
    ASSERT_TRUE(ready.IsMap()) << c.Where() << ": readinessProbe is not a grpc probe";
    EXPECT_EQ(IntAt(ready, {"port"}), port) << c.Where() << ": readinessProbe.grpc.port";
    const YAML::Node alive_grpc = At(c.container, {"livenessProbe", "grpc"});
    const YAML::Node alive_tcp = At(c.container, {"livenessProbe", "tcpSocket"});
    ASSERT_TRUE(alive_grpc.IsMap() || alive_tcp.IsMap())
        << c.Where() << ": livenessProbe is neither a grpc nor a tcpSocket probe";
    EXPECT_EQ(IntAt(alive_grpc.IsMap() ? alive_grpc : alive_tcp, {"port"}), port)
        << c.Where() << ": livenessProbe port";
    const auto labels = StringMap(At(c.pod, {"metadata", "labels"}));
    int services = 0;
    for (const K8sObject& s : objects) {
      if (s.kind != "Service" || !Selects(StringMap(At(s.node, {"spec", "selector"})), labels)) {
        continue;
      }
      ++services;
      for (const auto& p : At(s.node, {"spec", "ports"})) {
        const std::string target = ScalarAt(p, {"targetPort"});
        EXPECT_TRUE(target == std::to_string(port) || target == port_name)
            << s.Where() << ": targetPort " << target << " is not " << c.Where() << "'s port "
            << port;
      }
    }
    EXPECT_GE(services, 1) << c.Where() << ": no Service selects its pods";
  }
  EXPECT_EQ(served, kServices) << "every service should run in deploy/k8s";
}

TEST(K8sManifests, SelectorsMatchPodLabels) {
  const std::vector<K8sObject> objects = LoadManifests();
  for (const K8sObject& o : objects) {
    if (IsWorkload(o)) {
      EXPECT_TRUE(Selects(StringMap(At(o.node, {"spec", "selector", "matchLabels"})),
                          StringMap(At(o.node, {"spec", "template", "metadata", "labels"}))))
          << o.Where() << ": spec.selector.matchLabels does not match its pod template's labels";
    }
    if (o.kind == "StatefulSet") {
      const std::string service = ScalarAt(o.node, {"spec", "serviceName"});
      const K8sObject* headless = Find(objects, "Service", service);
      ASSERT_NE(headless, nullptr) << o.Where() << ": serviceName " << service << " is no Service";
      EXPECT_EQ(ScalarAt(headless->node, {"spec", "clusterIP"}), "None")
          << headless->Where() << ": the StatefulSet's governing Service must be headless";
    }
    if (o.kind != "Service") continue;
    const auto selector = StringMap(At(o.node, {"spec", "selector"}));
    int matched = 0;
    for (const K8sObject& w : objects) {
      if (IsWorkload(w) &&
          Selects(selector, StringMap(At(w.node, {"spec", "template", "metadata", "labels"})))) {
        ++matched;
      }
    }
    EXPECT_EQ(matched, 1) << o.Where() << ": spec.selector should match the pods of exactly one "
                          << "Deployment or StatefulSet";
  }
}

TEST(K8sManifests, AutoscalerTargetsAWorkloadItCanScale) {
  const std::vector<K8sObject> objects = LoadManifests();
  int autoscalers = 0;
  for (const K8sObject& hpa : objects) {
    if (hpa.kind != "HorizontalPodAutoscaler") continue;
    ++autoscalers;
    EXPECT_EQ(ScalarAt(hpa.node, {"apiVersion"}), "autoscaling/v2") << hpa.Where();
    const std::string kind = ScalarAt(hpa.node, {"spec", "scaleTargetRef", "kind"});
    const std::string name = ScalarAt(hpa.node, {"spec", "scaleTargetRef", "name"});
    const K8sObject* target = Find(objects, kind, name);
    ASSERT_NE(target, nullptr) << hpa.Where() << ": scaleTargetRef " << kind << "/" << name
                               << " is not in deploy/k8s/base";
    // Replicas are interchangeable (state and leases in the database): no stable identities.
    EXPECT_EQ(kind, "Deployment") << hpa.Where() << ": scaleTargetRef.kind";
    EXPECT_EQ(ScalarAt(hpa.node, {"spec", "scaleTargetRef", "apiVersion"}),
              ScalarAt(target->node, {"apiVersion"}))
        << hpa.Where() << ": scaleTargetRef.apiVersion";
    const int min = IntAt(hpa.node, {"spec", "minReplicas"});
    const int max = IntAt(hpa.node, {"spec", "maxReplicas"});
    const int replicas = IntAt(target->node, {"spec", "replicas"});
    EXPECT_GT(min, 1) << hpa.Where() << ": minReplicas (the detector runs several replicas)";
    EXPECT_LE(min, max) << hpa.Where();
    EXPECT_TRUE(replicas >= min && replicas <= max)
        << target->Where() << ": spec.replicas " << replicas << " is outside the autoscaler's "
        << min << ".." << max;
    for (const PodContainer& c : Containers(objects)) {
      if (c.workload != target) continue;
      EXPECT_FALSE(ScalarAt(c.container, {"resources", "requests", "cpu"}).empty())
          << c.Where() << ": a CPU autoscaler needs resources.requests.cpu";
      // Every replica it adds must share the others' store: a SQLite file would be a pod's own.
      const std::optional<std::string> store = FlagValue(c.words, "store");
      EXPECT_TRUE(store.has_value() && absl::StartsWith(*store, "$("))
          << c.Where() << ": scaled replicas need --store from the Secret, not "
          << store.value_or("(none)");
    }
  }
  EXPECT_EQ(autoscalers, 1) << "deploy/k8s should have one HorizontalPodAutoscaler";
}

TEST(K8sManifests, DataConfigMapsEqualTheDeployFiles) {
  const std::vector<K8sObject> objects = LoadManifests();
  for (const auto& [name, folder] : kDataConfigMaps) {
    const K8sObject* map = Find(objects, "ConfigMap", name);
    ASSERT_NE(map, nullptr) << "deploy/k8s has no ConfigMap " << name;
    const auto data = StringMap(At(map->node, {"data"}));
    const std::string dir = kSourceDir + "/deploy/" + folder;
    const std::set<std::string> files = FilesIn(dir, ".json");
    std::set<std::string> keys;
    for (const auto& [key, value] : data) {
      keys.insert(key);
      if (files.count(key) == 0) continue;
      EXPECT_EQ(value, ReadFile(dir + "/" + key))
          << map->Where() << ": data." << key << " differs from deploy/" << folder << "/" << key
          << " (run deploy/k8s/update-configmaps.sh)";
    }
    EXPECT_EQ(keys, files) << map->Where() << ": keys differ from the files in deploy/" << folder;
  }
}

TEST(K8sManifests, DataFlagsPointAtMountedVolumes) {
  const std::vector<K8sObject> objects = LoadManifests();
  for (const PodContainer& c : Containers(objects)) {
    // mount path -> the volume's source: "configMap NAME" or "claim NAME".
    std::map<std::string, std::string> volumes;
    for (const auto& v : At(c.pod, {"spec", "volumes"})) {
      const std::string name = ScalarAt(v, {"name"});
      if (!ScalarAt(v, {"configMap", "name"}).empty()) {
        volumes[name] = "configMap " + ScalarAt(v, {"configMap", "name"});
      } else if (!ScalarAt(v, {"persistentVolumeClaim", "claimName"}).empty()) {
        const std::string claim = ScalarAt(v, {"persistentVolumeClaim", "claimName"});
        EXPECT_NE(Find(objects, "PersistentVolumeClaim", claim), nullptr)
            << c.Where() << ": volume " << name << " claims " << claim << ", not in deploy/k8s";
        volumes[name] = "claim " + claim;
      } else {
        volumes[name] = "other";
      }
    }
    for (const auto& t : At(c.workload->node, {"spec", "volumeClaimTemplates"})) {
      volumes[ScalarAt(t, {"metadata", "name"})] = "claim template";
    }
    std::map<std::string, std::string> mounts;
    for (const auto& m : At(c.container, {"volumeMounts"})) {
      mounts[ScalarAt(m, {"mountPath"})] = volumes[ScalarAt(m, {"name"})];
    }
    for (const auto& [flag, value] : FlagsOf(c.words)) {
      if (flag == "catalog_dir" || flag == "workload_dir") {
        const std::string name = flag == "catalog_dir" ? "spotdnn-catalogs" : "spotdnn-workloads";
        EXPECT_EQ(mounts[value], "configMap " + name)
            << c.Where() << ": --" << flag << "=" << value << " is not a mount of " << name;
      } else if (flag == "db" || (flag == "store" && !absl::StartsWith(value, "$("))) {
        // A SQLite file must outlive the pod ($(VAR) stores come from a Secret: see below).
        auto spec = db::ParseStoreSpec(value, "--" + flag);
        ASSERT_TRUE(spec.ok()) << c.Where() << ": " << spec.status().message();
        if (spec->backend != db::Backend::kSqlite) continue;
        const std::string dir = fs::path(spec->target).parent_path().string();
        EXPECT_TRUE(absl::StartsWith(mounts[dir], "claim"))
            << c.Where() << ": --" << flag << "=" << value << " is not on a PersistentVolumeClaim";
      }
    }
  }
}

// A postgres:// URI taken apart: user@host[:port]/db (port 5432 when not given).
struct Dsn {
  std::string user, host, db;
  int port = -1;
};
std::optional<Dsn> ParseDsn(const std::string& uri) {
  static const std::regex kUri(R"(^postgres(?:ql)?://([^@/?:]+)@([^:/?]+)(?::([0-9]+))?/([^?]+))");
  std::smatch m;
  if (!std::regex_search(uri, m, kUri)) return std::nullopt;
  return Dsn{m[1], m[2], m[4], m[3].matched ? std::stoi(m[3]) : 5432};
}

// The env entries of a container by name.
std::map<std::string, YAML::Node> EnvOf(const YAML::Node& container) {
  std::map<std::string, YAML::Node> env;
  for (const auto& e : At(container, {"env"})) env[ScalarAt(e, {"name"})] = YAML::Node(e);
  return env;
}

// The Secret named `name` among `objects`, as its stringData.
std::map<std::string, std::string> SecretData(const std::vector<K8sObject>& objects,
                                              const std::string& name) {
  const K8sObject* secret = Find(objects, "Secret", name);
  return secret == nullptr ? std::map<std::string, std::string>{}
                           : StringMap(At(secret->node, {"stringData"}));
}

// Checks that `env_name` of `c` is read from key `key` of the store Secret.
void ExpectFromStoreSecret(const PodContainer& c, const std::string& env_name,
                           const std::string& key) {
  const auto env = EnvOf(c.container);
  auto it = env.find(env_name);
  ASSERT_NE(it, env.end()) << c.Where() << ": no env " << env_name;
  EXPECT_EQ(ScalarAt(it->second, {"valueFrom", "secretKeyRef", "name"}), kStoreSecret)
      << c.Where() << ": env " << env_name << " is not from the Secret " << kStoreSecret;
  EXPECT_EQ(ScalarAt(it->second, {"valueFrom", "secretKeyRef", "key"}), key)
      << c.Where() << ": env " << env_name << " secretKeyRef.key";
  EXPECT_TRUE(ScalarAt(it->second, {"value"}).empty())
      << c.Where() << ": env " << env_name << " has a literal value beside its secretKeyRef";
}

// The detector: a Deployment of identical replicas on the database the Secret names, each with the
// pod name as its replica id; no peer list, no volume of its own.
TEST(K8sManifests, DetectorReplicasShareTheStoreFromASecret) {
  const std::vector<K8sObject> objects = LoadManifests();
  for (const K8sObject& o : objects) {
    EXPECT_NE(o.kind, "StatefulSet") << o.Where() << ": no service needs stable pod identities";
  }
  const K8sObject* detector = Find(objects, "Deployment", "spotdnn-detector");
  ASSERT_NE(detector, nullptr) << "deploy/k8s/base has no Deployment spotdnn-detector";
  EXPECT_GT(IntAt(detector->node, {"spec", "replicas"}), 1) << detector->Where() << ": replicas";
  int containers = 0;
  for (const PodContainer& c : Containers(objects)) {
    if (c.workload != detector) continue;
    ++containers;
    EXPECT_EQ(c.program, "spotdnn-detector") << c.Where();
    EXPECT_EQ(FlagValue(c.words, "store").value_or(""), "$(SPOTDNN_DETECTOR_STORE)")
        << c.Where() << ": --store";
    ExpectFromStoreSecret(c, "SPOTDNN_DETECTOR_STORE", "store");
    ExpectFromStoreSecret(c, "PGPASSWORD", "password");
    EXPECT_EQ(FlagValue(c.words, "replica_id").value_or(""), "$(POD_NAME)")
        << c.Where() << ": --replica_id should be the pod name";
    EXPECT_EQ(ScalarAt(EnvOf(c.container)["POD_NAME"], {"valueFrom", "fieldRef", "fieldPath"}),
              "metadata.name")
        << c.Where() << ": env POD_NAME should be the downward API's metadata.name";
    for (const char* gone : {"peers", "db"}) {
      EXPECT_FALSE(FlagValue(c.words, gone).has_value())
          << c.Where() << ": --" << gone << " (replicas share the database now)";
    }
    for (const auto& m : At(c.container, {"volumeMounts"})) {
      EXPECT_NE(ScalarAt(m, {"mountPath"}), "/var/lib/spotdnn")
          << c.Where() << ": a data volume of its own (the state is in the database)";
    }
  }
  EXPECT_EQ(containers, 1) << detector->Where() << ": containers";
}

// Every $(VAR) in a container's command and args is one of its env entries (Kubernetes passes an
// unknown one through as the literal text), and no password is on a command line or in a literal
// env value. Checked in the base, the dev server and the profiler's PostgreSQL patch.
TEST(K8sManifests, ArgumentVariablesAreDefinedAndPasswordsStayInSecrets) {
  std::vector<K8sObject> objects = LoadManifests();
  for (const std::string& file : {kK8sDevDir + "/postgres.yaml", kProfilerPostgresPatch}) {
    for (K8sObject& o : LoadManifestFile(file, fs::relative(file, kK8sTopDir).string())) {
      objects.push_back(o);
    }
  }
  static const std::regex kReference(R"(\$\(([A-Za-z_][A-Za-z0-9_]*)\))");
  int checked = 0;
  for (const PodContainer& c : Containers(objects)) {
    const auto env = EnvOf(c.container);
    for (const std::string& word : c.words) {
      ++checked;
      for (auto it = std::sregex_iterator(word.begin(), word.end(), kReference);
           it != std::sregex_iterator(); ++it) {
        EXPECT_EQ(env.count((*it)[1]), 1u)
            << c.Where() << ": " << word << " names $(" << (*it)[1] << "), which is not in env";
      }
      EXPECT_FALSE(absl::StrContains(absl::AsciiStrToLower(word), "password"))
          << c.Where() << ": a password on the command line: " << word;
      if (absl::StrContains(word, "postgres://") || absl::StrContains(word, "postgresql://")) {
        const std::string uri = word.substr(word.find("postgres"));
        EXPECT_TRUE(db::ParseStoreSpec(uri, "store").ok())
            << c.Where() << ": " << db::ParseStoreSpec(uri, "store").status().message();
      }
    }
    for (const auto& [name, e] : env) {
      if (absl::StrContains(name, "PASSWORD")) {
        EXPECT_FALSE(ScalarAt(e, {"valueFrom", "secretKeyRef", "name"}).empty())
            << c.Where() << ": env " << name << " should come from a Secret";
      }
      const std::string value = ScalarAt(e, {"value"});
      if (absl::StartsWith(value, "postgres")) {
        EXPECT_TRUE(db::ParseStoreSpec(value, name).ok())
            << c.Where() << ": " << db::ParseStoreSpec(value, name).status().message();
      }
    }
  }
  EXPECT_GT(checked, 0) << "no container command lines found";
}

// The example Secret and the dev one hold the keys the pods read; their store is a postgres://
// URI without a password.
TEST(K8sManifests, StoreSecretsHaveTheKeysThePodsRead) {
  std::vector<K8sObject> objects = LoadManifests();
  for (K8sObject& o : LoadManifestFile(kProfilerPostgresPatch, "profiler-store.yaml")) {
    objects.push_back(o);
  }
  std::set<std::string> keys_read;
  for (const PodContainer& c : Containers(objects)) {
    for (const auto& [name, e] : EnvOf(c.container)) {
      const std::string secret = ScalarAt(e, {"valueFrom", "secretKeyRef", "name"});
      if (secret.empty()) continue;
      EXPECT_EQ(secret, kStoreSecret) << c.Where() << ": env " << name << " names Secret " << secret
                                      << ", which deploy/k8s does not describe";
      keys_read.insert(ScalarAt(e, {"valueFrom", "secretKeyRef", "key"}));
    }
  }
  EXPECT_EQ(keys_read, (std::set<std::string>{"store", "password"}));
  for (const auto& [path, shown] : std::vector<std::pair<std::string, std::string>>{
           {kExampleSecret, "example"}, {kK8sDevDir + "/postgres.yaml", "dev"}}) {
    const std::vector<K8sObject> file = LoadManifestFile(path, shown);
    const K8sObject* secret = Find(file, "Secret", kStoreSecret);
    ASSERT_NE(secret, nullptr) << path << ": no Secret " << kStoreSecret;
    EXPECT_EQ(ScalarAt(secret->node, {"metadata", "namespace"}), "spotdnn") << secret->Where();
    const auto data = StringMap(At(secret->node, {"stringData"}));
    for (const std::string& key : keys_read) {
      EXPECT_FALSE(data.count(key) == 0 || data.at(key).empty())
          << secret->Where() << ": stringData." << key;
    }
    const std::string store = data.count("store") ? data.at("store") : "";
    auto spec = db::ParseStoreSpec(store, "stringData.store");
    ASSERT_TRUE(spec.ok()) << secret->Where() << ": " << spec.status().message();
    EXPECT_EQ(spec->backend, db::Backend::kPostgres) << secret->Where() << ": store " << store;
    EXPECT_TRUE(ParseDsn(store).has_value())
        << secret->Where() << ": store " << store << " is not postgres://USER@HOST[:PORT]/DB";
  }
  EXPECT_EQ(SecretData(LoadManifestFile(kExampleSecret, "example"), kStoreSecret)["password"],
            "CHANGE-ME")
      << "the example Secret's password should be the obvious placeholder";
}

// deploy/k8s/dev/postgres.yaml: one PostgreSQL whose Service is where the Secrets' store points
// and whose user, database and password are the ones the store names.
TEST(K8sDevPostgres, ServiceMatchesTheStoreTheServicesRead) {
  const std::vector<K8sObject> objects =
      LoadManifestFile(kK8sDevDir + "/postgres.yaml", "dev/postgres.yaml");
  const K8sObject* service = nullptr;
  const K8sObject* server = nullptr;
  for (const K8sObject& o : objects) {
    EXPECT_EQ(ScalarAt(o.node, {"metadata", "namespace"}), "spotdnn") << o.Where();
    if (o.kind == "Service") service = &o;
    if (IsWorkload(o)) server = &o;
  }
  ASSERT_NE(service, nullptr) << "dev/postgres.yaml: no Service";
  ASSERT_NE(server, nullptr) << "dev/postgres.yaml: no Deployment or StatefulSet";
  EXPECT_EQ(IntAt(server->node, {"spec", "replicas"}), 1) << server->Where() << ": replicas";
  EXPECT_TRUE(Selects(StringMap(At(service->node, {"spec", "selector"})),
                      StringMap(At(server->node, {"spec", "template", "metadata", "labels"}))))
      << service->Where() << ": does not select " << server->Where();
  ASSERT_EQ(At(service->node, {"spec", "ports"}).size(), 1u) << service->Where() << ": ports";
  const int port = IntAt(At(service->node, {"spec", "ports"})[0], {"port"});
  const YAML::Node container = At(server->node, {"spec", "template", "spec", "containers"})[0];
  EXPECT_TRUE(absl::StartsWith(ScalarAt(container, {"image"}), "postgres:"))
      << server->Where() << ": image " << ScalarAt(container, {"image"});
  EXPECT_EQ(IntAt(At(container, {"ports"})[0], {"containerPort"}), port)
      << server->Where() << ": containerPort differs from " << service->Where() << "'s port";
  auto env = EnvOf(container);
  EXPECT_EQ(ScalarAt(env["POSTGRES_PASSWORD"], {"valueFrom", "secretKeyRef", "name"}), kStoreSecret)
      << server->Where() << ": POSTGRES_PASSWORD should be the password the services use";
  EXPECT_EQ(ScalarAt(env["POSTGRES_PASSWORD"], {"valueFrom", "secretKeyRef", "key"}), "password");

  const std::string dev_store = SecretData(objects, kStoreSecret)["store"];
  const std::optional<Dsn> dev = ParseDsn(dev_store);
  ASSERT_TRUE(dev.has_value()) << "dev/postgres.yaml: Secret store " << dev_store;
  EXPECT_TRUE(dev->host == service->name || absl::StartsWith(dev->host, service->name + "."))
      << "dev/postgres.yaml: the store's host " << dev->host << " is not the Service "
      << service->name;
  EXPECT_EQ(dev->port, port) << "dev/postgres.yaml: the store's port differs from the Service's";
  EXPECT_EQ(dev->user, ScalarAt(env["POSTGRES_USER"], {"value"}))
      << "dev/postgres.yaml: the store's user is not the server's POSTGRES_USER";
  EXPECT_EQ(dev->db, ScalarAt(env["POSTGRES_DB"], {"value"}))
      << "dev/postgres.yaml: the store's database is not the server's POSTGRES_DB";

  const std::string example_store =
      SecretData(LoadManifestFile(kExampleSecret, "example"), kStoreSecret)["store"];
  const std::optional<Dsn> example = ParseDsn(example_store);
  ASSERT_TRUE(example.has_value()) << "examples/: Secret store " << example_store;
  EXPECT_EQ(example->port, port)
      << "examples/spotdnn-postgres-secret.yaml: the store's port differs from the dev Service's";
}

TEST(K8sManifests, PodsRunAsTheImageUserWithResourceLimits) {
  std::string image_user;
  for (const DockerStage& stage : ParseDockerfile(ReadFile(kDockerfile))) {
    for (const DockerInstruction& i : stage.instructions) {
      if (i.op == "USER") image_user = i.args;
    }
  }
  const std::string uid = image_user.substr(0, image_user.find(':'));
  const std::vector<K8sObject> objects = LoadManifests();
  for (const PodContainer& c : Containers(objects)) {
    const YAML::Node pod_security = At(c.pod, {"spec", "securityContext"});
    EXPECT_EQ(ScalarAt(pod_security, {"runAsNonRoot"}), "true") << c.Where() << ": runAsNonRoot";
    EXPECT_EQ(ScalarAt(pod_security, {"runAsUser"}), uid)
        << c.Where() << ": runAsUser differs from the Dockerfile's USER " << image_user;
    EXPECT_EQ(ScalarAt(c.container, {"securityContext", "allowPrivilegeEscalation"}), "false")
        << c.Where() << ": securityContext.allowPrivilegeEscalation";
    for (const char* bound : {"requests", "limits"}) {
      for (const char* resource : {"cpu", "memory"}) {
        EXPECT_FALSE(ScalarAt(c.container, {"resources", bound, resource}).empty())
            << c.Where() << ": resources." << bound << "." << resource;
      }
    }
  }
}

TEST(K8sManifests, FlagsAreOnesTheProgramsAccept) {
  const std::vector<K8sObject> objects = LoadManifests();
  for (const PodContainer& c : Containers(objects)) {
    ExpectFlagsAccepted(c.Where(), c.program, c.words);
  }
}

// ---- container files ----

TEST(Dockerfile, BuildsOnDebian12AndCopiesBuiltPrograms) {
  const std::vector<DockerStage> stages = ParseDockerfile(ReadFile(kDockerfile));
  ASSERT_GE(stages.size(), 2u) << "deploy/container/Dockerfile: not multi-stage";
  const DockerStage& build = stages.front();
  const DockerStage& runtime = stages.back();
  EXPECT_EQ(build.image, "debian:12") << "Dockerfile: the build stage's FROM";
  EXPECT_FALSE(build.name.empty()) << "Dockerfile: the build stage has no name (FROM ... AS)";
  EXPECT_EQ(runtime.image, "debian:12-slim") << "Dockerfile: the runtime stage's FROM";
  bool runs_setup = false;
  for (const DockerInstruction& i : build.instructions) {
    runs_setup |= i.op == "RUN" && absl::StrContains(i.args, "deploy/setup.sh");
  }
  EXPECT_TRUE(runs_setup) << "Dockerfile: the build stage does not run deploy/setup.sh";

  std::set<std::string> stage_names;
  for (const DockerStage& s : stages) stage_names.insert(s.name);
  const std::set<std::string> targets = CMakeExecutables(kSourceDir);
  std::set<std::string> copied;
  for (const DockerInstruction& i : runtime.instructions) {
    if (i.op != "COPY" || !absl::StartsWith(i.args, "--from=")) continue;
    std::vector<std::string> words = SplitWords(i.args);
    const std::string from = words[0].substr(7);
    EXPECT_EQ(stage_names.count(from), 1u)
        << "Dockerfile: COPY --from=" << from << " names no stage";
    if (words.back() != "/usr/local/bin/") continue;
    for (size_t w = 1; w + 1 < words.size(); ++w) {
      const std::string program = fs::path(words[w]).filename().string();
      copied.insert(program);
      EXPECT_EQ(targets.count(program), 1u)
          << "Dockerfile: copies " << words[w] << ", but " << program << " is no CMake target";
    }
  }
  EXPECT_EQ(copied, kImagePrograms) << "Dockerfile: the programs copied into /usr/local/bin/";
  bool numeric_user = false;
  for (const DockerInstruction& i : runtime.instructions) {
    if (i.op == "USER") numeric_user = std::regex_match(i.args, std::regex("[1-9][0-9]*:[0-9]+"));
  }
  EXPECT_TRUE(numeric_user) << "Dockerfile: the runtime stage's USER should be a numeric, "
                               "non-root uid:gid (for runAsNonRoot)";
}

// The libraries `program` names as NEEDED, each with the path the loader resolves it to here.
std::map<std::string, std::string> LinkedLibraries(const std::string& program) {
  std::map<std::string, std::string> libraries;
  const std::string path = kBinaryDir + "/" + program;
  const CommandResult needed = RunCommand("objdump -p '" + path + "' | awk '/NEEDED/ {print $2}'");
  const CommandResult ldd = RunCommand("ldd '" + path + "'");
  static const std::regex kResolved(R"(^\s*(\S+) => (/\S+))");
  std::map<std::string, std::string> resolved;
  for (absl::string_view line : absl::StrSplit(ldd.output, '\n')) {
    std::smatch m;
    const std::string text(line);
    if (std::regex_search(text, m, kResolved)) resolved[m[1]] = m[2];
  }
  for (absl::string_view soname : absl::StrSplit(needed.output, '\n', absl::SkipEmpty())) {
    libraries[std::string(soname)] = resolved[std::string(soname)];
  }
  return libraries;
}

// The Debian package that holds each of `paths` here ("" when none does). Paths are tried as
// given, with /usr toggled (Debian 12's dpkg database is not usr-merged) and resolved through
// symlinks (alternatives such as liblapack.so.3).
std::map<std::string, std::string> OwningPackages(const std::set<std::string>& paths) {
  std::map<std::string, std::vector<std::string>> candidates;
  std::string query = "dpkg-query -S";
  for (const std::string& path : paths) {
    std::error_code ec;
    for (std::string p : {path, fs::canonical(path, ec).string()}) {
      if (p.empty()) continue;
      const std::string other = absl::StartsWith(p, "/usr/") ? p.substr(4) : "/usr" + p;
      for (const std::string& c : {p, other}) {
        candidates[path].push_back(c);
        absl::StrAppend(&query, " '", c, "'");
      }
    }
  }
  std::map<std::string, std::string> owner_of_file;
  static const std::regex kOwner(R"(^([a-z0-9.+-]+)(?::[a-z0-9]+)?: (/\S+)$)");
  for (absl::string_view line : absl::StrSplit(RunCommand(query).output, '\n')) {
    std::smatch m;
    const std::string text(line);
    if (std::regex_match(text, m, kOwner)) owner_of_file[m[2]] = m[1];
  }
  std::map<std::string, std::string> owners;
  for (const std::string& path : paths) {
    for (const std::string& c : candidates[path]) {
      if (owner_of_file.count(c) != 0) {
        owners[path] = owner_of_file[c];
        break;
      }
    }
  }
  return owners;
}

// `roots` and every package they depend on, by the dependencies recorded here; alternatives
// ("a | b") all count, and virtual names (such as liblapack.so.3) are kept.
std::set<std::string> DependencyClosure(const std::set<std::string>& roots) {
  std::set<std::string> closure = roots;
  std::set<std::string> frontier = roots;
  static const std::regex kName(R"(([a-z0-9][a-z0-9.+-]+)(?::[a-z0-9]+)?(?:\s*\([^)]*\))?)");
  while (!frontier.empty()) {
    std::string query = "dpkg-query -W -f='${Depends}, ${Pre-Depends}\\n'";
    for (const std::string& p : frontier) absl::StrAppend(&query, " '", p, "'");
    frontier.clear();
    const std::string depends = RunCommand(query).output;
    for (absl::string_view item : absl::StrSplit(depends, absl::ByAnyChar(",|\n"))) {
      std::smatch m;
      const std::string text(absl::StripAsciiWhitespace(item));
      if (std::regex_match(text, m, kName) && closure.insert(m[1]).second) frontier.insert(m[1]);
    }
  }
  return closure;
}

// Every shared library the programs link must come from a package the runtime stage installs, or
// one those depend on, or one debian:12-slim has. Uses this machine's dpkg database (Debian 12).
// A sanitizer build (what deploy/test.sh builds) links the sanitizers' runtimes, which the image's
// plain release build does not: those are left out, and the rest is checked as in a normal build
// (its -O1 link keeps more Abseil libraries, from the same package).
TEST(Dockerfile, RuntimeStageInstallsEveryLinkedLibrary) {
  if (RunCommand("dpkg-query --version").exit_code != 0 ||
      RunCommand("objdump --version").exit_code != 0) {
    GTEST_SKIP() << "no dpkg-query or objdump here: cannot map libraries to Debian packages";
  }
  const std::vector<DockerStage> stages = ParseDockerfile(ReadFile(kDockerfile));
  ASSERT_FALSE(stages.empty()) << "deploy/container/Dockerfile: no FROM";
  std::set<std::string> installed = {"libc6", "libgcc-s1", "libstdc++6", "zlib1g"};
  for (const DockerInstruction& i : stages.back().instructions) {
    if (i.op != "RUN") continue;
    // The package names after "apt-get install", up to the end of that command.
    const std::vector<std::string> words = SplitWords(i.args);
    for (size_t w = 1; w < words.size(); ++w) {
      if (words[w - 1] != "apt-get" || words[w] != "install") continue;
      for (++w; w < words.size() && words[w] != "&&" && words[w] != ";"; ++w) {
        if (words[w][0] != '-') installed.insert(words[w]);
      }
    }
  }
  const std::set<std::string> available = DependencyClosure(installed);
  std::map<std::string, std::map<std::string, std::string>> linked;  // program -> soname -> path
  std::set<std::string> paths;
  for (const std::string& program : kImagePrograms) {
    linked[program] = LinkedLibraries(program);
    ASSERT_FALSE(linked[program].empty()) << program << ": objdump found no NEEDED libraries";
    for (const auto& [soname, path] : linked[program]) {
      EXPECT_FALSE(path.empty()) << program << ": ldd does not resolve " << soname;
      if (!path.empty()) paths.insert(path);
    }
  }
  std::map<std::string, std::string> owners = OwningPackages(paths);
  for (const auto& [program, libraries] : linked) {
    for (const auto& [soname, path] : libraries) {
      if (path.empty()) continue;
      if (SPOTDNN_SANITIZED_BUILD &&
          (absl::StartsWith(soname, "libasan.") || absl::StartsWith(soname, "libubsan."))) {
        continue;
      }
      const std::string& package = owners[path];
      EXPECT_FALSE(package.empty()) << program << " links " << path << ", which no package holds";
      EXPECT_TRUE(available.count(package) != 0 || available.count(soname) != 0)
          << "Dockerfile: the runtime stage's packages do not bring " << package << " (" << soname
          << ", linked by " << program << ")";
    }
  }
}

// ---- systemd ----

struct Unit {
  std::string file;
  UnitFile unit;
  std::vector<std::string> exec;  // ExecStart with its Environment= defaults expanded
  std::string program;
};

std::vector<Unit> LoadUnits(const std::string& dir) {
  std::vector<Unit> units;
  for (const std::string& file : FilesIn(dir, ".service")) {
    Unit u{file, ParseUnit(ReadFile(dir + "/" + file)), {}, ""};
    u.exec = ExpandedExecStart(u.unit);
    if (!u.exec.empty()) u.program = fs::path(u.exec[0]).filename().string();
    units.push_back(u);
  }
  return units;
}

std::string First(const UnitFile& unit, const std::string& key) {
  const std::vector<std::string> values = UnitValues(unit, "Service", key);
  return values.empty() ? "" : values.front();
}

TEST(SystemdUnits, OnePerServiceRestartedHardenedAndUnprivileged) {
  std::set<std::string> programs;
  const std::string sysusers = ReadFile(kUnitDir + "/spotdnn.sysusers.conf");
  for (const Unit& u : LoadUnits(kUnitDir)) {
    programs.insert(u.program);
    EXPECT_EQ(u.file, u.program + ".service")
        << "deploy/systemd/" << u.file << ": runs " << u.program;
    EXPECT_EQ(u.exec[0], "/usr/local/bin/" + u.program) << u.file << ": ExecStart program path";
    EXPECT_EQ(First(u.unit, "Restart"), "on-failure") << u.file << ": Restart";
    const std::string user = First(u.unit, "User");
    EXPECT_TRUE(!user.empty() && user != "root") << u.file << ": User should be a dedicated user";
    EXPECT_TRUE(absl::StrContains(sysusers, "u " + user + " "))
        << u.file << ": User " << user << " is not declared in spotdnn.sysusers.conf";
    EXPECT_FALSE(UnitValues(u.unit, "Service", "EnvironmentFile").empty())
        << u.file << ": no EnvironmentFile for overrides";
    for (const auto& [key, value] :
         std::vector<std::pair<std::string, std::string>>{{"NoNewPrivileges", "yes"},
                                                          {"ProtectSystem", "strict"},
                                                          {"ProtectHome", "yes"},
                                                          {"PrivateTmp", "yes"},
                                                          {"CapabilityBoundingSet", ""}}) {
      const std::vector<std::string> values = UnitValues(u.unit, "Service", key);
      EXPECT_TRUE(!values.empty() && values.back() == value)
          << u.file << ": " << key << " should be \"" << value << "\"";
    }
    for (const char* flag : {"db", "store"}) {
      const auto value = FlagValue(u.exec, flag);
      if (!value) continue;
      auto spec = db::ParseStoreSpec(*value, absl::StrCat("--", flag));
      ASSERT_TRUE(spec.ok()) << u.file << ": " << spec.status().message();
      if (spec->backend != db::Backend::kSqlite) continue;
      const std::string state = First(u.unit, "StateDirectory");
      EXPECT_FALSE(state.empty()) << u.file << ": a SQLite --" << flag
                                  << " without a StateDirectory";
      EXPECT_EQ(fs::path(spec->target).parent_path().string(), "/var/lib/" + state)
          << u.file << ": --" << flag << "=" << *value << " is not in its StateDirectory";
    }
  }
  EXPECT_EQ(programs, kServices) << "deploy/systemd should have one unit per service";
}

TEST(SystemdUnits, FlagsAndPortsMatchThePrograms) {
  for (const Unit& u : LoadUnits(kUnitDir)) {
    const std::string where = "deploy/systemd/" + u.file + " ExecStart";
    ExpectFlagsAccepted(where, u.program, u.exec);
    const std::optional<std::string> listen = FlagValue(u.exec, "listen");
    ASSERT_TRUE(listen.has_value()) << where << ": no --listen";
    EXPECT_EQ(PortOf(*listen), DefaultListenPort(u.program))
        << where << ": --listen=" << *listen << " differs from " << u.program << "'s default port";
  }
}

// The profiler and detector take --store from an overridable variable whose default is the SQLite
// file they have always used (an upgrade keeps its data); the detector has no peer list and a
// replica id unique per host.
TEST(SystemdUnits, StoresDefaultToTodaysSqliteFilesAndCanBePostgres) {
  const std::map<std::string, std::pair<std::string, std::string>> expected = {
      {"spotdnn-detector",
       {"SPOTDNN_DETECTOR_STORE", "sqlite:/var/lib/spotdnn/detector/detector.db"}},
      {"spotdnn-profiler",
       {"SPOTDNN_PROFILER_STORE", "sqlite:/var/lib/spotdnn/profiler/profiles.db"}}};
  int found = 0;
  for (const Unit& u : LoadUnits(kUnitDir)) {
    auto it = expected.find(u.program);
    if (it == expected.end()) continue;
    ++found;
    const auto& [variable, default_store] = it->second;
    const std::string exec = UnitValues(u.unit, "Service", "ExecStart").back();
    EXPECT_TRUE(absl::StrContains(exec, "--store=${" + variable + "}"))
        << u.file << ": ExecStart should pass --store=${" << variable << "} (one word)";
    EXPECT_EQ(FlagValue(u.exec, "store").value_or(""), default_store)
        << u.file << ": the default --store (Environment=" << variable << "=...)";
    EXPECT_FALSE(FlagValue(u.exec, "db").has_value()) << u.file << ": --db beside --store";
    // Overridable: the default is set before the EnvironmentFile lines (later lines win).
    int default_at = -1, first_file_at = -1;
    const auto& lines = u.unit.at("Service");
    for (int i = 0; i < static_cast<int>(lines.size()); ++i) {
      if (lines[i].first == "Environment" && absl::StartsWith(lines[i].second, variable + "=")) {
        default_at = i;
      }
      if (lines[i].first == "EnvironmentFile" && first_file_at < 0) first_file_at = i;
    }
    EXPECT_TRUE(default_at >= 0 && first_file_at > default_at)
        << u.file << ": Environment=" << variable << "=... should come before EnvironmentFile=";
    if (u.program == "spotdnn-detector") {
      EXPECT_FALSE(FlagValue(u.exec, "peers").has_value())
          << u.file << ": --peers (replicas share the database now)";
      EXPECT_EQ(FlagValue(u.exec, "replica_id").value_or(""), "%H")
          << u.file << ": --replica_id should default to the host name (%H), unique per VM";
    }
  }
  EXPECT_EQ(found, 2) << "deploy/systemd: the detector and profiler units";
}

// `cmake --install` into a scratch prefix: the units' programs and data folders must be there.
TEST(SystemdUnits, InstallPutsProgramsUnitsAndDataInPlace) {
  const fs::path prefix =
      fs::temp_directory_path() / ("spotdnn-install-" + std::to_string(getpid()));
  fs::remove_all(prefix);
  const CommandResult install =
      RunCommand(absl::StrCat("'", SPOTDNN_CMAKE_COMMAND, "' --install '", kBinaryDir,
                              "' --prefix '", prefix.string(), "'"));
  ASSERT_EQ(install.exit_code, 0) << "cmake --install failed:\n" << install.output;
  const std::string unit_dir = (prefix / "lib/systemd/system").string();
  std::set<std::string> installed_units = FilesIn(unit_dir, ".service");
  EXPECT_EQ(installed_units, FilesIn(kUnitDir, ".service")) << "units installed to " << unit_dir;
  EXPECT_TRUE(fs::exists(prefix / "lib/sysusers.d/spotdnn.conf"));
  for (const Unit& u : LoadUnits(unit_dir)) {
    EXPECT_TRUE(absl::StartsWith(u.exec[0], prefix.string() + "/bin/"))
        << "installed " << u.file << ": ExecStart " << u.exec[0] << " is not under the prefix";
    EXPECT_EQ(fs::status(u.exec[0]).permissions() & fs::perms::owner_exec, fs::perms::owner_exec)
        << "installed " << u.file << ": ExecStart " << u.exec[0] << " is not an installed program";
    for (const char* flag : {"catalog_dir", "workload_dir"}) {
      if (const auto dir = FlagValue(u.exec, flag)) {
        EXPECT_FALSE(FilesIn(*dir, ".json").empty())
            << "installed " << u.file << ": --" << flag << "=" << *dir << " holds no *.json";
      }
    }
  }
  for (const std::string& program : kImagePrograms) {
    EXPECT_TRUE(fs::exists(prefix / "bin" / program)) << program << " is not installed";
  }
  if (RunCommand("systemd-analyze --version").exit_code == 0) {
    const CommandResult verify = RunCommand(absl::StrCat(
        "cd '", unit_dir, "' && SYSTEMD_LOG_LEVEL=warning systemd-analyze verify --man=no ",
        absl::StrJoin(installed_units, " ")));
    // verify exits 0 on unknown keys and bad values, but names the file in a warning.
    EXPECT_TRUE(verify.exit_code == 0 && !absl::StrContains(verify.output, unit_dir))
        << "systemd-analyze verify:\n"
        << verify.output;
  }
  fs::remove_all(prefix);
}

}  // namespace
}  // namespace spotdnn::deploy_test
