// A data file compiled into the binaries (see cmake/Embed.cmake).
#ifndef SPOTDNN_SERVICES_COMMON_EMBEDDED_FILE_H_
#define SPOTDNN_SERVICES_COMMON_EMBEDDED_FILE_H_

#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace spotdnn::services {

// One embedded file: its base name without extension, and its bytes.
struct EmbeddedFile {
  absl::string_view name;
  absl::string_view content;
};

// The built-in catalogs (deploy/catalogs/*.json) and workload profiles (deploy/workloads/*.json).
absl::Span<const EmbeddedFile> BuiltinCatalogFiles();
absl::Span<const EmbeddedFile> BuiltinWorkloadFiles();

}  // namespace spotdnn::services

#endif  // SPOTDNN_SERVICES_COMMON_EMBEDDED_FILE_H_
