// Files read for people: the end of a log, for an error message or to see how a process ended.
#ifndef SPOTDNN_BASE_FILES_H_
#define SPOTDNN_BASE_FILES_H_

#include <cstddef>
#include <string>

namespace spotdnn::base {

// The last `bytes` of the file at `path` (the whole file when it is shorter; "" when it cannot be
// read). Seeks to them: a long log is not read whole.
std::string FileTail(const std::string& path, size_t bytes);

}  // namespace spotdnn::base

#endif  // SPOTDNN_BASE_FILES_H_
