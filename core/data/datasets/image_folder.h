// ImageFolder, after torchvision.datasets.ImageFolder: images sorted into one subfolder per
// class, root/<class>/.../<image>. Class names are the subfolder names; class k is the k-th
// name in sorted (byte) order, listed by classes(). Images are found recursively inside
// each class folder, matched by extension (case-insensitive), sorted by path; hidden files
// and folders (names starting with '.') and files directly in root are ignored.
//
// Construction only lists the files; get(i) reads and decodes image i (PNG, JPEG, BMP via
// stb_image), so memory stays at one list of paths. Decoding yields 8 bits per channel
// (16-bit PNGs are reduced to 8 bits).
//
// Errors are anvil::Error: at construction, a missing root, no class folders, or a class
// folder without images (unless allowed); in get(), an unreadable or undecodable file, named
// by path with the system's or the decoder's reason.
//
// Thread-safety: immutable after construction; concurrent get() calls are safe. stb_image
// keeps its failure reason in a thread-local variable in Debian's libstb (its header
// defines STBI_THREAD_LOCAL as C++11 thread_local / C11 _Thread_local unless
// STBI_NO_THREAD_LOCALS is set, and libstb.so's stbi_failure_reason reads TLS), so the
// reason reported for a failed decode belongs to that decode even under concurrency. Its
// other global settings (vertical flip and friends) are never changed by Anvil.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/data/dataset.h"
#include "core/tensor/tensor.h"

namespace anvil::data {

struct ImageFolderOptions {
  // Channels of the decoded image: 3 (RGB, the default), 1 (gray), 2 (gray + alpha),
  // 4 (RGBA), or 0 for as stored in the file (then images may differ in channel count).
  int channels = 3;
  // File name extensions to load, without the dot; compared case-insensitively.
  std::vector<std::string> extensions = {"png", "jpg", "jpeg", "bmp"};
  // Whether a class folder without any image is allowed (it still gets a class index).
  bool allow_empty_classes = false;
  // A directory the folder and every image must stay inside (a server's data root): the walk
  // follows no directory symlink, a file symlink leading out is an error, and each image is
  // opened beneath it when read (core/util/confined_open.h). "" = no confinement.
  std::string confine_to;
};

class ImageFolder : public Dataset {
 public:
  explicit ImageFolder(std::string root, ImageFolderOptions options = {});

  int64_t size() const override { return static_cast<int64_t>(samples_.size()); }
  // input: uint8 [H, W, C] (HWC, as decoded); target: int64 [] class index.
  Example get(int64_t index) const override;
  std::string name() const override;

  const std::vector<std::string>& classes() const { return classes_; }
  const std::string& path(int64_t index) const;
  int64_t label(int64_t index) const;

 private:
  struct Sample {
    std::string path;
    int64_t label;
  };
  std::string root_;
  int channels_;
  std::string confine_to_;
  std::vector<std::string> classes_;
  std::vector<Sample> samples_;
};

// Decodes an image file (PNG, JPEG, BMP, ... anything stb_image reads) into uint8 [H, W, C]
// with `channels` channels (0: as stored). Errors name the path and the decoder's reason.
Tensor read_image(const std::string& path, int channels = 3, const std::string& confine_to = "");

// Writes a uint8 image [H, W, C] (C in 1..4) or [H, W] (gray) as PNG or BMP (lossless; BMP
// stores 1 and 2 channels expanded to RGB and drops alpha except with 4 channels). For
// tests, examples and benchmarks.
void write_png(const std::string& path, const Tensor& image);
void write_bmp(const std::string& path, const Tensor& image);

}  // namespace anvil::data
