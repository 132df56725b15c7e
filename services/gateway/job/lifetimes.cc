#include "services/gateway/job/lifetimes.h"

#include "provisioner/revocation_model.h"

namespace spotdnn::job {

absl::Status AddLifetimeFile(const std::string& path, double censor_at_s,
                             spotdnn::v1::SimulationOptions* options) {
  auto file = provisioner::ReadLifetimeCsv(path, {.censor_at_s = censor_at_s});
  if (!file.ok()) return file.status();
  for (const provisioner::LifetimeGroup& g : file->groups) {
    spotdnn::v1::LifetimeGroup* out = options->add_lifetime_groups();
    out->set_name(g.name);
    out->set_source(path);
    for (const provisioner::LifetimeObservation& o : g.observations) {
      spotdnn::v1::LifetimeObservation* x = out->add_observations();
      x->set_lifetime_s(o.lifetime_s);
      x->set_censored(o.censored);
    }
  }
  return absl::OkStatus();
}

}  // namespace spotdnn::job
