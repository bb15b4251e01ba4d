#include "store/manifest.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>

#include "util/error.h"

namespace deltafin::store {

using nlohmann::json;

namespace {

uint64_t key(int layer, int expert) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(layer)) << 32) |
         static_cast<uint32_t>(expert);
}

// Field access that names the field in its error.
const json& field(const json& j, const char* name, const std::string& where,
                  const std::string& what) {
  if (!j.is_object() || !j.contains(name))
    fail("{}: {} has no \"{}\"; the manifest is damaged or from another tool: re-run deltafin pack",
         what, where, name);
  return j.at(name);
}

template <typename T>
T get(const json& j, const char* name, const std::string& where, const std::string& what) {
  const json& v = field(j, name, where, what);
  bool ok = true;
  if constexpr (std::is_same_v<T, bool>) {
    ok = v.is_boolean();
  } else if constexpr (std::is_unsigned_v<T>) {
    ok = v.is_number_unsigned();
  } else if constexpr (std::is_integral_v<T>) {
    ok = v.is_number_integer();
  }
  if (ok) {
    try {
      return v.get<T>();
    } catch (const json::exception&) {
    }
  }
  fail("{}: {}.{} has the wrong type ({}); re-run deltafin pack", what, where, name, v.dump());
}

uint64_t parse_hex64(const std::string& s, const std::string& where, const std::string& what) {
  uint64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v, 16);
  if (s.size() != 16 || ec != std::errc() || p != s.data() + s.size())
    fail("{}: {} checksum '{}' is not 16 hex digits; re-run deltafin pack", what, where, s);
  return v;
}

}  // namespace

std::string checksum_hex(uint64_t v) { return fmt::format("{:016x}", v); }

void Manifest::index() {
  by_key_.clear();
  by_key_.reserve(records.size());
  for (size_t i = 0; i < records.size(); ++i)
    by_key_.emplace(key(records[i].layer, records[i].expert), i);
}

const Record* Manifest::find(int layer, int expert) const {
  auto it = by_key_.find(key(layer, expert));
  return it == by_key_.end() ? nullptr : &records[it->second];
}

void Manifest::validate(const std::string& what) const {
  if (version != kManifestVersion)
    fail("{}: store version {} is not supported (this deltafin reads version {}); re-pack the store",
         what, version, kManifestVersion);
  if (alignment == 0 || (alignment & (alignment - 1)) != 0)
    fail("{}: alignment {} is not a power of two", what, alignment);
  if (drives.empty()) fail("{}: lists no drives", what);
  for (size_t i = 0; i < files.size(); ++i) {
    const auto& f = files[i];
    if (f.drive < 0 || static_cast<size_t>(f.drive) >= drives.size())
      fail("{}: file {} ({}) is on drive {}, but only {} drives are listed", what, i, f.name,
           f.drive, drives.size());
    if (f.name.empty() || f.name.front() == '/' || f.name.find("..") != std::string::npos)
      fail("{}: file {} has name '{}'; names are relative to their drive directory", what, i,
           f.name);
  }
  for (size_t l = 0; l < layouts.size(); ++l) {
    std::vector<std::pair<uint64_t, uint64_t>> spans;
    for (const auto& t : layouts[l].tensors) {
      if (t.offset + t.bytes > layouts[l].bytes || t.offset + t.bytes < t.offset)
        fail("{}: layout {} tensor {} (offset {}, {} bytes) lies outside its {}-byte record", what,
             l, t.name, t.offset, t.bytes, layouts[l].bytes);
      spans.emplace_back(t.offset, t.offset + t.bytes);
    }
    std::sort(spans.begin(), spans.end());
    for (size_t i = 1; i < spans.size(); ++i)
      if (spans[i].first < spans[i - 1].second)
        fail("{}: layout {} has overlapping tensors at byte {}", what, l, spans[i].first);
  }
  std::unordered_map<uint64_t, size_t> seen;
  for (size_t i = 0; i < records.size(); ++i) {
    const auto& r = records[i];
    const std::string name = fmt::format("record {} (layer {}, expert {})", i, r.layer, r.expert);
    if (!seen.emplace(key(r.layer, r.expert), i).second)
      fail("{}: {} repeats layer {} expert {}", what, name, r.layer, r.expert);
    if (r.layout < 0 || static_cast<size_t>(r.layout) >= layouts.size())
      fail("{}: {} has layout {}, but {} layouts are listed", what, name, r.layout, layouts.size());
    if (r.length == 0 || r.length != layouts[r.layout].bytes)
      fail("{}: {} is {} bytes but its layout says {}", what, name, r.length,
           layouts[r.layout].bytes);
    if (r.copies.empty()) fail("{}: {} has no copies", what, name);
    std::vector<int> drives_used;
    for (const auto& c : r.copies) {
      if (c.file < 0 || static_cast<size_t>(c.file) >= files.size())
        fail("{}: {} is in file {}, but {} files are listed", what, name, c.file, files.size());
      const auto& f = files[c.file];
      if (c.offset % alignment != 0)
        fail("{}: {} starts at offset {} of {}, not a multiple of {}", what, name, c.offset,
             f.name, alignment);
      if (complete && c.offset + r.length > f.bytes)
        fail("{}: {} (offset {}, {} bytes) lies past the end of {} ({} bytes)", what, name,
             c.offset, r.length, f.name, f.bytes);
      if (std::find(drives_used.begin(), drives_used.end(), f.drive) != drives_used.end())
        fail("{}: {} has two copies on drive {}; mirrors must be on distinct drives", what, name,
             f.drive);
      drives_used.push_back(f.drive);
    }
  }
}

json Manifest::to_json() const {
  json jf = json::array();
  for (const auto& f : files) jf.push_back({{"drive", f.drive}, {"name", f.name}, {"bytes", f.bytes}});
  json jl = json::array();
  for (const auto& l : layouts) {
    json ts = json::array();
    for (const auto& t : l.tensors)
      ts.push_back({{"name", t.name},
                    {"dtype", t.dtype},
                    {"shape", t.shape},
                    {"offset", t.offset},
                    {"bytes", t.bytes}});
    jl.push_back({{"bytes", l.bytes}, {"tensors", ts}});
  }
  json jr = json::array();
  for (const auto& r : records) {
    json cs = json::array();
    for (const auto& c : r.copies) cs.push_back(json::array({c.file, c.offset}));
    jr.push_back({{"layer", r.layer},
                  {"expert", r.expert},
                  {"layout", r.layout},
                  {"length", r.length},
                  {"xxh64", checksum_hex(r.checksum)},
                  {"copies", cs}});
  }
  return {{"format", "deltafin-store"},
          {"version", version},
          {"complete", complete},
          {"placement", placement},
          {"alignment", alignment},
          {"checksum", "xxh64"},
          {"drives", drives},
          {"files", jf},
          {"layouts", jl},
          {"records", jr},
          {"model", {{"config", model_config}, {"source", source}}}};
}

Manifest Manifest::from_json(const json& j, const std::string& what) {
  if (!j.is_object() || j.value("format", "") != "deltafin-store")
    fail("{}: not a deltafin store manifest (no \"format\": \"deltafin-store\")", what);
  Manifest m;
  m.version = get<int>(j, "version", "manifest", what);
  if (m.version != kManifestVersion)
    fail("{}: store version {} is not supported (this deltafin reads version {}); re-pack the store",
         what, m.version, kManifestVersion);
  if (j.value("checksum", "") != "xxh64")
    fail("{}: checksum \"{}\" is not supported (expected xxh64)", what, j.value("checksum", ""));
  m.complete = get<bool>(j, "complete", "manifest", what);
  m.placement = get<std::string>(j, "placement", "manifest", what);
  m.alignment = get<uint32_t>(j, "alignment", "manifest", what);
  m.drives = get<std::vector<std::string>>(j, "drives", "manifest", what);
  const json& jf = field(j, "files", "manifest", what);
  for (size_t i = 0; i < jf.size(); ++i) {
    std::string w = fmt::format("files[{}]", i);
    m.files.push_back({get<int>(jf[i], "drive", w, what), get<std::string>(jf[i], "name", w, what),
                       get<uint64_t>(jf[i], "bytes", w, what)});
  }
  const json& jl = field(j, "layouts", "manifest", what);
  for (size_t i = 0; i < jl.size(); ++i) {
    std::string w = fmt::format("layouts[{}]", i);
    RecordLayout l;
    l.bytes = get<uint64_t>(jl[i], "bytes", w, what);
    const json& ts = field(jl[i], "tensors", w, what);
    for (size_t k = 0; k < ts.size(); ++k) {
      std::string wt = fmt::format("{}.tensors[{}]", w, k);
      l.tensors.push_back({get<std::string>(ts[k], "name", wt, what),
                           get<std::string>(ts[k], "dtype", wt, what),
                           get<std::vector<int64_t>>(ts[k], "shape", wt, what),
                           get<uint64_t>(ts[k], "offset", wt, what),
                           get<uint64_t>(ts[k], "bytes", wt, what)});
    }
    m.layouts.push_back(std::move(l));
  }
  const json& jr = field(j, "records", "manifest", what);
  m.records.reserve(jr.size());
  for (size_t i = 0; i < jr.size(); ++i) {
    std::string w = fmt::format("records[{}]", i);
    Record r;
    r.layer = get<int>(jr[i], "layer", w, what);
    r.expert = get<int>(jr[i], "expert", w, what);
    r.layout = get<int>(jr[i], "layout", w, what);
    r.length = get<uint64_t>(jr[i], "length", w, what);
    r.checksum = parse_hex64(get<std::string>(jr[i], "xxh64", w, what), w, what);
    const json& cs = field(jr[i], "copies", w, what);
    for (const auto& c : cs) {
      if (!c.is_array() || c.size() != 2 || !c[0].is_number_integer() || !c[1].is_number_unsigned())
        fail("{}: {}.copies holds {}; expected [file, offset] pairs", what, w, c.dump());
      r.copies.push_back({c[0].get<int>(), c[1].get<uint64_t>()});
    }
    m.records.push_back(std::move(r));
  }
  const json& model = field(j, "model", "manifest", what);
  m.model_config = field(model, "config", "model", what);
  m.source = field(model, "source", "model", what);
  m.validate(what);
  m.index();
  return m;
}

Manifest Manifest::load(const std::string& store_or_file, bool require_complete) {
  std::string path = store_or_file;
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) path += std::string("/") + kManifestFile;
  std::ifstream in(path);
  if (!in)
    fail("cannot read store manifest {}: {}; give the directory deltafin pack wrote (--out)", path,
         std::strerror(errno));
  json j = json::parse(in, nullptr, false);
  if (j.is_discarded()) fail("{}: not valid JSON; the store manifest is damaged: re-run deltafin pack", path);
  Manifest m = from_json(j, path);
  if (require_complete && !m.complete)
    fail("{}: the store is incomplete (deltafin pack was interrupted); re-run the same pack "
         "command to resume it", path);
  return m;
}

void Manifest::save(const std::string& path) const {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << to_json().dump(1) << "\n";
    out.flush();
    if (!out) fail("cannot write {}: {}; check free space", tmp, std::strerror(errno));
  }
  int fd = ::open(tmp.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0)
    fail("cannot replace {}: {}", path, std::strerror(errno));
}

}  // namespace deltafin::store
