// The flags registry_flags.h declares.
#include "services/common/registry_flags.h"

ABSL_FLAG(std::string, port_file, "", "write the bound port to this file once serving");
ABSL_FLAG(std::string, catalog_dir, "", "also serve every *.json catalog in this folder by name");
ABSL_FLAG(std::string, workload_dir, "",
          "also serve every *.json workload profile in this folder by name");
