#include "base/files.h"

#include <algorithm>
#include <fstream>
#include <sstream>

namespace spotdnn::base {

std::string FileTail(const std::string& path, size_t bytes) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return "";
  const std::streamoff size = in.tellg();
  if (size < 0) return "";
  in.seekg(std::max<std::streamoff>(0, size - static_cast<std::streamoff>(bytes)));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace spotdnn::base
