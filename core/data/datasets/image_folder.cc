#include "core/data/datasets/image_folder.h"

#include <stb/stb_image.h>
#include <stb/stb_image_write.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <filesystem>
#include <system_error>

#include "core/data/datasets/file_io.h"
#include "core/ops/functions.h"
#include "core/util/confined_open.h"
#include "core/util/error.h"
#include "core/util/interruption.h"
#include "core/util/utf8.h"

namespace anvil::data {
namespace {

namespace fs = std::filesystem;

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

bool IsHidden(const fs::path& p) { return p.filename().string().starts_with('.'); }

// Checks an image tensor for the writers and returns it contiguous, with its H, W, C.
Tensor CheckImage(const char* fn, const Tensor& image, int& h, int& w, int& c) {
  ANVIL_CHECK_TYPE(image.dtype() == kUInt8, fn, ": expected a uint8 image, got dtype ", image.dtype());
  ANVIL_CHECK(image.dim() == 2 || image.dim() == 3, fn, ": expected an image [H, W, C] or [H, W], got ",
              shape_str(image.sizes()));
  const int64_t channels = image.dim() == 3 ? image.size(2) : 1;
  ANVIL_CHECK(channels >= 1 && channels <= 4, fn, ": expected 1 to 4 channels, got ", shape_str(image.sizes()));
  ANVIL_CHECK(
      image.size(0) > 0 && image.size(1) > 0 && image.size(0) <= INT_MAX / 4 && image.size(1) <= INT_MAX / 4 / channels,
      fn, ": cannot write an image of size ", shape_str(image.sizes()));
  h = static_cast<int>(image.size(0));
  w = static_cast<int>(image.size(1));
  c = static_cast<int>(channels);
  return image.cpu().contiguous();
}

// stb_image_write's callback: appends the encoded bytes to a std::string.
void AppendBytes(void* context, void* data, int size) {
  static_cast<std::string*>(context)->append(static_cast<const char*>(data), static_cast<size_t>(size));
}

}  // namespace

Tensor read_image(const std::string& path, int channels, const std::string& confine_to) {
  ANVIL_CHECK(channels >= 0 && channels <= 4, "read_image: channels must be 0 (as stored) or 1 to 4, got ", channels);
  const std::string bytes = file_io::ReadFile(path, /*gunzip=*/false, confine_to);
  ANVIL_CHECK(bytes.size() <= static_cast<size_t>(INT_MAX), path, ": cannot decode image: file too large (",
              bytes.size(), " bytes)");
  int w = 0, h = 0, stored = 0;
  stbi_uc* pixels = stbi_load_from_memory(reinterpret_cast<const stbi_uc*>(bytes.data()),
                                          static_cast<int>(bytes.size()), &w, &h, &stored, channels);
  ANVIL_CHECK(pixels != nullptr, path, ": cannot decode image: ", stbi_failure_reason());
  const int c = channels != 0 ? channels : stored;
  // The tensor adopts stb's buffer: no copy, freed with stbi_image_free when unused.
  return from_blob(pixels, {h, w, c}, kUInt8, [](void* p) { stbi_image_free(p); });
}

void write_png(const std::string& path, const Tensor& image) {
  int h = 0, w = 0, c = 0;
  const Tensor data = CheckImage("write_png", image, h, w, c);
  std::string bytes;
  ANVIL_CHECK(stbi_write_png_to_func(AppendBytes, &bytes, w, h, c, data.data_ptr(), w * c) != 0, path,
              ": PNG encoding failed");
  file_io::WriteFileAtomic(path, bytes, /*gzip=*/false);
}

void write_bmp(const std::string& path, const Tensor& image) {
  int h = 0, w = 0, c = 0;
  const Tensor data = CheckImage("write_bmp", image, h, w, c);
  std::string bytes;
  ANVIL_CHECK(stbi_write_bmp_to_func(AppendBytes, &bytes, w, h, c, data.data_ptr()) != 0, path,
              ": BMP encoding failed");
  file_io::WriteFileAtomic(path, bytes, /*gzip=*/false);
}

ImageFolder::ImageFolder(std::string root, ImageFolderOptions options)
    : root_(std::move(root)), channels_(options.channels), confine_to_(options.confine_to) {
  ANVIL_CHECK(channels_ >= 0 && channels_ <= 4, "ImageFolder: channels must be 0 (as stored) or 1 to 4, got ",
              channels_);
  std::vector<std::string> extensions;
  for (const std::string& e : options.extensions) {
    // Appended rather than "." + ...: GCC 12 misreports a -Wrestrict overlap for that form.
    std::string ext = ".";
    ext += Lower(e.starts_with('.') ? e.substr(1) : e);
    extensions.push_back(std::move(ext));
  }
  std::error_code ec;
  ANVIL_CHECK(fs::is_directory(root_, ec), "ImageFolder: ", root_,
              fs::exists(root_, ec) ? ": not a folder" : ": no such folder");
  // The folder itself as the kernel resolves it now (a symlink swapped in after a submit
  // check included) must lie inside the confinement.
  ANVIL_CHECK(confine_to_.empty() || opens_beneath(confine_to_, root_), "ImageFolder: ", root_, ": leads outside ",
              confine_to_, " (a symbolic link?)");
  try {
    for (const fs::directory_entry& entry : fs::directory_iterator(root_)) {
      if (entry.is_directory() && !IsHidden(entry.path())) {
        // The class names are the model's labels, served and stored as text.
        const std::string name = entry.path().filename().string();
        check_utf8(name, anvil::detail::StrCat("ImageFolder: ", root_, ": the name of class folder \"",
                                               to_valid_utf8(name), "\""));
        classes_.push_back(name);
      }
    }
    ANVIL_CHECK(!classes_.empty(), "ImageFolder: ", root_, ": no class folders (expected root/<class>/<image>)");
    std::sort(classes_.begin(), classes_.end());

    std::vector<std::string> empty_classes;
    int64_t walked = 0;
    for (size_t k = 0; k < classes_.size(); ++k) {
      std::vector<std::string> paths;
      const auto opts = confine_to_.empty() ? fs::directory_options::follow_directory_symlink |
                                                  fs::directory_options::skip_permission_denied
                                            : fs::directory_options::skip_permission_denied;
      for (auto it = fs::recursive_directory_iterator(fs::path(root_) / classes_[k], opts);
           it != fs::recursive_directory_iterator(); ++it) {
        if ((++walked & 0xFFF) == 0) interruption_point();  // every 4096 entries
        if (IsHidden(it->path())) {
          if (it->is_directory()) it.disable_recursion_pending();
          continue;
        }
        if (!it->is_regular_file()) continue;
        const std::string ext = Lower(it->path().extension().string());
        if (std::find(extensions.begin(), extensions.end(), ext) != extensions.end()) {
          ANVIL_CHECK(confine_to_.empty() || !it->is_symlink() || opens_beneath(confine_to_, it->path().string()),
                      it->path().string(), ": a symbolic link leading outside ", confine_to_, " (refused)");
          paths.push_back(it->path().string());
        }
      }
      if (paths.empty()) empty_classes.push_back(classes_[k]);
      std::sort(paths.begin(), paths.end());
      for (std::string& p : paths) samples_.push_back({std::move(p), static_cast<int64_t>(k)});
    }
    std::string ext_list;
    for (const std::string& e : options.extensions) ext_list += (ext_list.empty() ? "" : ", ") + e;
    ANVIL_CHECK(!samples_.empty(), "ImageFolder: ", root_, ": no images (extensions ", ext_list,
                ") in any class folder");
    if (!options.allow_empty_classes && !empty_classes.empty()) {
      std::string names;
      for (const std::string& n : empty_classes) names += (names.empty() ? "" : ", ") + n;
      ANVIL_CHECK(false, "ImageFolder: ", root_, ": class folders without images (extensions ", ext_list, "): ", names,
                  " (set allow_empty_classes to keep them)");
    }
  } catch (const fs::filesystem_error& e) {
    // Rethrown as the engine's error type, so callers catch one kind.
    throw Error(anvil::detail::StrCat("ImageFolder: ", root_, ": ", e.what()));
  }
}

Example ImageFolder::get(int64_t index) const {
  CheckIndex(index);
  const Sample& s = samples_[static_cast<size_t>(index)];
  return Example{{Example::kInput, read_image(s.path, channels_, confine_to_)},
                 {Example::kTarget, scalar_tensor(s.label, kInt64)}};
}

std::string ImageFolder::name() const {
  return anvil::detail::StrCat("ImageFolder(", root_, ": ", size(), " images, ", classes_.size(), " classes)");
}

const std::string& ImageFolder::path(int64_t index) const {
  CheckIndex(index);
  return samples_[static_cast<size_t>(index)].path;
}

int64_t ImageFolder::label(int64_t index) const {
  CheckIndex(index);
  return samples_[static_cast<size_t>(index)].label;
}

}  // namespace anvil::data
