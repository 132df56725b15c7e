// The two backends of base/db/database.h, opened by OpenStore.
#ifndef SPOTDNN_BASE_DB_BACKENDS_H_
#define SPOTDNN_BASE_DB_BACKENDS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "base/db/database.h"

namespace spotdnn::db {

// The statement's start, to say in an error which one failed.
inline std::string Abbreviated(absl::string_view sql) {
  constexpr size_t kShown = 60;
  return sql.size() <= kShown ? std::string(sql) : absl::StrCat(sql.substr(0, kShown), "…");
}

// The SQLite file at `path` (":memory:" for a private database), its folder created as needed.
absl::StatusOr<std::unique_ptr<Database>> OpenSqlite(const std::string& path,
                                                     absl::string_view field);
// The PostgreSQL database at libpq URI `uri`, the store's tables in schema `name` (created).
absl::StatusOr<std::unique_ptr<Database>> OpenPostgres(const std::string& uri,
                                                       absl::string_view field,
                                                       absl::string_view name);

}  // namespace spotdnn::db

#endif  // SPOTDNN_BASE_DB_BACKENDS_H_
