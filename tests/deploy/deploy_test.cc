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

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "tests/deploy/deploy_files.h"

namespace spotdnn::deploy_test {
namespace {

namespace fs = std::filesystem;

const std::string kSourceDir = SPOTDNN_SOURCE_DIR;
const std::string kBinaryDir = SPOTDNN_BINARY_DIR;
const std::string kK8sDir = kSourceDir + "/deploy/k8s";
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

std::vector<std::string> KustomizationResources() {
  std::vector<std::string> resources;
  const YAML::Node k = YAML::LoadFile(kK8sDir + "/kustomization.yaml");
  for (const auto& r : At(k, {"resources"})) resources.push_back(r.as<std::string>());
  return resources;
}

std::vector<K8sObject> LoadManifests() {
  std::vector<K8sObject> objects;
  for (const std::string& file : KustomizationResources()) {
    try {
      for (const YAML::Node& doc : YAML::LoadAllFromFile(kK8sDir + "/" + file)) {
        if (doc.IsNull()) continue;
        objects.push_back(
            {file, ScalarAt(doc, {"kind"}), ScalarAt(doc, {"metadata", "name"}), doc});
      }
    } catch (const YAML::Exception& e) {
      ADD_FAILURE() << "deploy/k8s/" << file << ": YAML does not parse: " << e.what();
    }
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
        << "kustomization.yaml: resource " << r << " is not a file in deploy/k8s";
  }
  for (const std::string& file : FilesIn(kK8sDir, ".yaml")) {
    if (file == "kustomization.yaml") continue;
    EXPECT_EQ(listed.count(file), 1u)
        << "deploy/k8s/" << file << " is not in kustomization.yaml's resources";
  }
}

// kustomize (in kubectl) renders the folder as `kubectl apply -k` would; it needs no cluster.
TEST(K8sManifests, KustomizeRendersThem) {
  if (RunCommand("kubectl version --client").exit_code != 0) {
    GTEST_SKIP() << "no kubectl here: kustomize rendering not checked";
  }
  const CommandResult render = RunCommand("kubectl kustomize '" + kK8sDir + "'");
  ASSERT_EQ(render.exit_code, 0) << "kubectl kustomize deploy/k8s:\n" << render.output;
  size_t rendered = 0;
  for (const YAML::Node& doc : YAML::LoadAll(render.output)) rendered += doc.IsMap() ? 1 : 0;
  EXPECT_EQ(rendered, LoadManifests().size()) << "kubectl kustomize rendered another object count";
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
    for (const char* probe : {"readinessProbe", "livenessProbe"}) {
      const YAML::Node grpc = At(c.container, {probe, "grpc"});
      ASSERT_TRUE(grpc.IsMap()) << c.Where() << ": " << probe << " is not a grpc probe";
      EXPECT_EQ(IntAt(grpc, {"port"}), port) << c.Where() << ": " << probe << ".grpc.port";
    }
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
                               << " is not in deploy/k8s";
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
      // Detector replicas know each other from a peer list that covers maxReplicas.
      for (const auto& env : At(c.container, {"env"})) {
        if (ScalarAt(env, {"name"}) == "DETECTOR_MAX_REPLICAS") {
          EXPECT_EQ(ScalarAt(env, {"value"}), std::to_string(max))
              << c.Where() << ": env DETECTOR_MAX_REPLICAS differs from " << hpa.Where()
              << "'s maxReplicas";
        }
      }
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
      } else if (flag == "db") {
        const std::string dir = fs::path(value).parent_path().string();
        EXPECT_TRUE(absl::StartsWith(mounts[dir], "claim"))
            << c.Where() << ": --db=" << value << " is not on a PersistentVolumeClaim";
      }
    }
  }
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
TEST(Dockerfile, RuntimeStageInstallsEveryLinkedLibrary) {
  if (SPOTDNN_SANITIZED_BUILD) {
    GTEST_SKIP() << "a sanitizer build links libasan/libubsan and its debug link keeps more "
                    "libraries; the image is a plain release build, checked in the normal build";
  }
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
    if (const auto db = FlagValue(u.exec, "db")) {
      const std::string state = First(u.unit, "StateDirectory");
      EXPECT_FALSE(state.empty()) << u.file << ": --db without a StateDirectory";
      EXPECT_EQ(fs::path(*db).parent_path().string(), "/var/lib/" + state)
          << u.file << ": --db=" << *db << " is not in its StateDirectory";
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
