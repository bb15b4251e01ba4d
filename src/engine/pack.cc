#include "engine/pack.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>
#include <filesystem>
#include <fmt/format.h>

#include "format/checkpoint.h"
#include "model/model.h"
#include "residency/heat.h"
#include "store/checksum.h"
#include "store/expert_store.h"
#include "store/io_engine.h"
#include "store/manifest.h"
#include "util/aligned.h"
#include "util/error.h"
#include "util/timer.h"

namespace deltafin {

namespace fs = std::filesystem;

namespace {

constexpr uint64_t kAlign = 4096;
constexpr uint64_t kTensorAlign = 64;

uint64_t round_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

// The tensors of one matrix as published: data and scales, with names and dtypes.
struct Piece {
  std::string name, dtype;
  std::vector<int64_t> shape;
  const uint8_t* data;
  uint64_t bytes;
};

void add_matrix(const std::string& role, const kernels::WeightView& w, std::vector<Piece>& out) {
  using kernels::Encoding;
  const uint64_t rb = static_cast<uint64_t>(kernels::traits(w.enc).row_bytes(w.cols));
  const uint64_t data_bytes = rb * static_cast<uint64_t>(w.rows);
  switch (w.enc) {
    case Encoding::F32: out.push_back({role + ".weight", "F32", {w.rows, w.cols}, w.data, data_bytes}); break;
    case Encoding::BF16: out.push_back({role + ".weight", "BF16", {w.rows, w.cols}, w.data, data_bytes}); break;
    case Encoding::FP8_B128: {
      DF_CHECK(w.scale_row0 == 0);
      out.push_back({role + ".weight", "F8_E4M3", {w.rows, w.cols}, w.data, data_bytes});
      const int64_t sr = (w.rows + 127) / 128, sc = (w.cols + 127) / 128;
      out.push_back({role + ".weight_scale_inv", "F32", {sr, sc}, w.scales, static_cast<uint64_t>(sr * sc * 4)});
      break;
    }
    case Encoding::INT4_G32:
      out.push_back({role + ".weight_packed", "I32", {w.rows, w.cols / 8}, w.data, data_bytes});
      out.push_back({role + ".weight_scale", "BF16", {w.rows, w.cols / 32}, w.scales,
                     static_cast<uint64_t>(w.rows * (w.cols / 32) * 2)});
      break;
    case Encoding::MXFP4_G32:
      out.push_back({role + ".weight_packed", "U8", {w.rows, w.cols / 2}, w.data, data_bytes});
      out.push_back({role + ".weight_scale", "U8", {w.rows, w.cols / 32}, w.scales,
                     static_cast<uint64_t>(w.rows * (w.cols / 32))});
      break;
  }
}

std::vector<Piece> expert_pieces(const ExpertWeights& ew) {
  std::vector<Piece> p;
  add_matrix("gate", ew.gate, p);
  add_matrix("up", ew.up, p);
  add_matrix("down", ew.down, p);
  return p;
}

store::RecordLayout layout_of(const std::vector<Piece>& pieces) {
  store::RecordLayout lay;
  uint64_t off = 0;
  for (const auto& p : pieces) {
    off = round_up(off, kTensorAlign);
    lay.tensors.push_back({p.name, p.dtype, p.shape, off, p.bytes});
    off += p.bytes;
  }
  lay.bytes = round_up(off, kAlign);
  return lay;
}

bool same_layout(const store::RecordLayout& a, const store::RecordLayout& b) {
  if (a.bytes != b.bytes || a.tensors.size() != b.tensors.size()) return false;
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    const auto &x = a.tensors[i], &y = b.tensors[i];
    if (x.name != y.name || x.dtype != y.dtype || x.shape != y.shape || x.offset != y.offset || x.bytes != y.bytes)
      return false;
  }
  return true;
}

// What identifies the source checkpoint: its files' names, sizes and the
// checksum of config.json and of each file's header.
nlohmann::json source_identity(const Checkpoint& ck) {
  nlohmann::json files = nlohmann::json::array();
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(ck.dir())) {
    const std::string n = e.path().filename().string();
    if (n.ends_with(".safetensors") || n == "config.json" || n == "model.safetensors.index.json") names.push_back(n);
  }
  std::sort(names.begin(), names.end());
  for (const auto& n : names) files.push_back({{"name", n}, {"bytes", fs::file_size(ck.dir() / n)}});
  const std::string cfg = ck.config().json().dump();
  return {{"dir", fs::absolute(ck.dir()).lexically_normal().string()},
          {"files", files},
          {"config_xxh64", store::checksum_hex(store::xxh64(cfg.data(), cfg.size()))}};
}

class FileWriter {
 public:
  explicit FileWriter(const std::string& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) fail("cannot create {}: {}", path, std::strerror(errno));
  }
  ~FileWriter() {
    if (fd_ >= 0) ::close(fd_);
  }
  void write_at(const uint8_t* p, uint64_t n, uint64_t off) {
    while (n > 0) {
      ssize_t w = ::pwrite(fd_, p, n, static_cast<off_t>(off));
      if (w < 0) {
        if (errno == EINTR) continue;
        fail("error writing {} at offset {}: {} (disk full?)", path_, off, std::strerror(errno));
      }
      p += w;
      n -= static_cast<uint64_t>(w);
      off += static_cast<uint64_t>(w);
    }
  }
  void sync() {
    if (::fdatasync(fd_) != 0) fail("cannot flush {}: {}", path_, std::strerror(errno));
  }

 private:
  std::string path_;
  int fd_ = -1;
};

}  // namespace

PackResult pack_store(const PackOptions& o) {
  Stopwatch clock;
  if (o.drives.empty()) fail("--drives: give at least one drive directory");
  if (o.placement != "stripe" && o.placement != "mirror" && o.placement != "hot-replicas")
    fail("--placement: '{}' is not one of mirror, stripe, hot-replicas", o.placement);
  auto ck = Checkpoint::open(o.model_dir);
  ModelOptions mo;
  auto model = load_model(*ck, mo);
  const auto& table = model->checkpoint_experts();
  const int D = static_cast<int>(o.drives.size());
  fs::create_directories(o.out_dir);
  for (const auto& d : o.drives) {
    std::error_code ec;
    fs::create_directories(d, ec);
    if (ec || !fs::is_directory(d)) fail("--drives: cannot create drive directory {}: {}", d, ec.message());
  }
  // The plan: records layer-major; stripe round-robin; mirrors on every drive.
  store::Manifest m;
  m.placement = o.placement;
  m.alignment = static_cast<uint32_t>(kAlign);
  for (const auto& d : o.drives) m.drives.push_back(fs::absolute(d).lexically_normal().string());
  for (int d = 0; d < D; ++d) m.files.push_back({d, "deltafin-experts.bin", 0});
  m.model_config = ck->config().json();
  m.source = source_identity(*ck);
  m.source["model_dir"] = fs::absolute(o.model_dir).lexically_normal().string();
  std::vector<std::set<int>> hot_keys;
  std::set<std::pair<int, int>> hot;
  if (o.placement == "hot-replicas") {
    int L = static_cast<int>(table.size()), E = 0;
    for (const auto& row : table) E = std::max(E, static_cast<int>(row.size()));
    auto heat = residency::HeatHistogram::load((fs::path(o.out_dir) / "heat.json").string(), L, E);
    uint64_t total = 0;
    for (const auto& row : table) total += row.size();
    for (auto p : heat.hottest(static_cast<size_t>(o.hot_fraction * static_cast<double>(total)))) hot.insert(p);
  }
  std::vector<uint64_t> file_end(D, 0);
  uint64_t stripe = 0;
  for (size_t l = 0; l < table.size(); ++l) {
    for (size_t e = 0; e < table[l].size(); ++e) {
      store::RecordLayout lay = layout_of(expert_pieces(table[l][e]));
      int li = -1;
      for (size_t i = 0; i < m.layouts.size(); ++i)
        if (same_layout(m.layouts[i], lay)) li = static_cast<int>(i);
      if (li < 0) {
        li = static_cast<int>(m.layouts.size());
        m.layouts.push_back(lay);
      }
      store::Record r;
      r.layer = static_cast<int>(l);
      r.expert = static_cast<int>(e);
      r.layout = li;
      r.length = lay.bytes;
      const bool everywhere = o.placement == "mirror" || hot.count({r.layer, r.expert});
      for (int d = 0; d < D; ++d) {
        if (!everywhere && d != static_cast<int>(stripe % D)) continue;
        r.copies.push_back({d, file_end[d]});
        file_end[d] += lay.bytes;
      }
      ++stripe;
      m.records.push_back(r);
    }
  }
  for (int d = 0; d < D; ++d) m.files[d].bytes = file_end[d];
  if (m.records.empty()) fail("{} has no routed experts to pack", o.model_dir);
  // Resume: an incomplete manifest of the same plan keeps its written records.
  const std::string mpath = (fs::path(o.out_dir) / store::kManifestFile).string();
  size_t done = 0;
  if (fs::exists(mpath)) {
    store::Manifest old = store::Manifest::load(o.out_dir, /*require_complete=*/false);
    bool same = old.placement == m.placement && old.drives == m.drives && old.source == m.source &&
                old.layouts.size() == m.layouts.size();
    for (size_t i = 0; same && i < old.layouts.size(); ++i) same = same_layout(old.layouts[i], m.layouts[i]);
    if (!same)
      fail("{} already holds a store of another model, drive list or placement; pack into an empty directory",
           o.out_dir);
    if (old.complete) {
      fmt::print(stderr, "{} is already complete ({} records); nothing to do\n", o.out_dir, old.records.size());
      return {old.records.size(), old.records.size(), 0, clock.seconds()};
    }
    for (const auto& r : old.records) {
      if (done >= m.records.size() || r.layer != m.records[done].layer || r.expert != m.records[done].expert) break;
      if (r.checksum == 0) break;
      m.records[done].checksum = r.checksum;
      ++done;
    }
  }
  PackResult res;
  res.records_skipped = done;
  std::vector<std::unique_ptr<FileWriter>> files;
  for (int d = 0; d < D; ++d)
    files.push_back(std::make_unique<FileWriter>((fs::path(m.drives[d]) / m.files[d].name).string()));
  auto save_partial = [&](size_t n_done) {
    for (auto& f : files) f->sync();
    store::Manifest part = m;
    part.complete = false;
    part.records.resize(n_done);
    part.index();
    part.save(mpath);
  };
  uint64_t max_len = 0;
  for (const auto& l : m.layouts) max_len = std::max(max_len, l.bytes);
  AlignedArray<uint8_t> buf(max_len, kAlign);
  Stopwatch since_save, since_print;
  uint64_t bytes_since_save = 0;
  for (size_t i = done; i < m.records.size(); ++i) {
    store::Record& r = m.records[i];
    const auto pieces = expert_pieces(table[r.layer][r.expert]);
    const store::RecordLayout& lay = m.layouts[r.layout];
    std::memset(buf.data(), 0, lay.bytes);
    for (size_t t = 0; t < pieces.size(); ++t)
      std::memcpy(buf.data() + lay.tensors[t].offset, pieces[t].data, pieces[t].bytes);
    r.checksum = store::xxh64(buf.data(), lay.bytes);
    for (const auto& c : r.copies) files[m.files[c.file].drive]->write_at(buf.data(), lay.bytes, c.offset);
    res.bytes_written += lay.bytes * r.copies.size();
    bytes_since_save += lay.bytes * r.copies.size();
    ++res.records;
    if (since_save.seconds() > 5 || bytes_since_save > (1ull << 30)) {
      save_partial(i + 1);
      since_save.reset();
      bytes_since_save = 0;
    }
    if (o.progress && since_print.seconds() > 1) {
      fmt::print(stderr, "\rpack: {}/{} records, {:.0f} MB written, {:.0f} MB/s   ", i + 1, m.records.size(),
                 res.bytes_written / 1e6, res.bytes_written / 1e6 / clock.seconds());
      since_print.reset();
    }
  }
  for (auto& f : files) f->sync();
  m.complete = true;
  m.index();
  m.validate(mpath);
  m.save(mpath);
  res.seconds = clock.seconds();
  if (o.progress)
    fmt::print(stderr, "\rpack: {} records ({} resumed), {:.1f} MB written in {:.1f} s over {} drive(s), placement {}\n",
               m.records.size(), done, res.bytes_written / 1e6, res.seconds, D, m.placement);
  return res;
}

uint64_t verify_store(const std::string& store_dir, const std::function<void(uint64_t, uint64_t)>& progress) {
  auto engine = store::make_io_engine(store::IoKind::Uring);
  store::StoreOptions so;
  so.verify_reads = true;
  store::ExpertStore st(store_dir, *engine, so);
  const auto& recs = st.manifest().records;
  uint64_t max_len = 0;
  for (const auto& r : recs) max_len = std::max(max_len, st.buffer_bytes(r));
  const size_t depth = 8;
  std::vector<AlignedArray<uint8_t>> bufs;
  for (size_t i = 0; i < depth; ++i) bufs.emplace_back(max_len, st.buffer_alignment());
  std::vector<size_t> free_bufs;
  for (size_t i = 0; i < depth; ++i) free_bufs.push_back(i);
  std::vector<store::RecordCompletion> done;
  uint64_t checked = 0;
  size_t next = 0;
  while (checked < recs.size()) {
    while (next < recs.size() && !free_bufs.empty()) {
      size_t b = free_bufs.back();
      free_bufs.pop_back();
      st.request(recs[next].layer, recs[next].expert, bufs[b].data(), b);
      ++next;
    }
    done.clear();
    st.wait(done, 1);
    for (const auto& c : done) {
      free_bufs.push_back(c.tag);
      ++checked;
    }
    if (progress) progress(checked, recs.size());
  }
  return checked;
}

}  // namespace deltafin
