#include "fusetune/worker/spool.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "fusetune/base/file.h"
#include "fusetune/records/json.h"
#include "nlohmann/json.hpp"

namespace fusetune {
namespace {

constexpr uint8_t kTrialRecord = 1;
constexpr uint8_t kAckRecord = 2;
constexpr size_t kHeaderBytes = 9;                  // u32 length, u32 crc, u8 type
constexpr uint32_t kMaxPayloadBytes = 64u << 20;    // a larger length is corruption

absl::Status ErrnoStatus(std::string_view what, const std::string& path) {
  return absl::InternalError(absl::StrCat(std::string(what), " ", path, ": ", std::strerror(errno)));
}

uint32_t RecordCrc(uint8_t type, std::string_view payload) {
  uLong crc = crc32(0L, Z_NULL, 0);
  crc = crc32(crc, &type, 1);
  crc = crc32(crc, reinterpret_cast<const Bytef*>(payload.data()), static_cast<uInt>(payload.size()));
  return static_cast<uint32_t>(crc);
}

void PutU32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}
uint32_t GetU32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

std::string EncodeRecord(uint8_t type, std::string_view payload) {
  std::string rec;
  rec.reserve(kHeaderBytes + payload.size());
  PutU32(rec, static_cast<uint32_t>(payload.size()));
  PutU32(rec, RecordCrc(type, payload));
  rec.push_back(static_cast<char>(type));
  rec.append(payload);
  return rec;
}

// The spool file's bytes; NotFound when there is no spool yet.
absl::StatusOr<std::string> ReadSpoolFile(const std::string& path) {
  absl::StatusOr<std::string> data = ReadFileToString(path);
  if (!data.ok()) return absl::Status(data.status().code(), absl::StrCat("spool: ", data.status().message()));
  return data;
}

// Parses records until the end or the first torn/corrupt one.
absl::StatusOr<SpoolLog> ParseSpool(std::string_view data) {
  SpoolLog log;
  size_t pos = 0;
  while (pos < data.size()) {
    if (data.size() - pos < kHeaderBytes) break;
    uint32_t len = GetU32(data.data() + pos);
    uint32_t crc = GetU32(data.data() + pos + 4);
    uint8_t type = static_cast<uint8_t>(data[pos + 8]);
    if (len > kMaxPayloadBytes || data.size() - pos - kHeaderBytes < len) break;
    std::string_view payload = data.substr(pos + kHeaderBytes, len);
    if (RecordCrc(type, payload) != crc) break;
    if (type == kTrialRecord) {
      absl::StatusOr<Trial> trial = TrialFromJson(payload);
      if (!trial.ok()) break;  // CRC matched but content is not ours: treat as corruption
      log.appended.push_back(*std::move(trial));
    } else if (type == kAckRecord) {
      log.acknowledged.emplace_back(payload);
    } else {
      break;
    }
    pos += kHeaderBytes + len;
  }
  log.valid_bytes = static_cast<int64_t>(pos);
  log.torn_tail = pos < data.size();
  return log;
}

absl::Status WriteAll(int fd, std::string_view bytes, const std::string& path) {
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("write", path);
    }
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status SyncDirectoryOf(const std::string& path) {
  std::string dir = ".";
  if (size_t slash = path.rfind('/'); slash != std::string::npos) dir = slash == 0 ? "/" : path.substr(0, slash);
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return ErrnoStatus("open directory", dir);
  int rc = ::fsync(dfd);
  ::close(dfd);
  if (rc != 0) return ErrnoStatus("fsync directory", dir);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<SpoolLog> ReadSpoolLog(const std::string& path) {
  absl::StatusOr<std::string> data = ReadSpoolFile(path);
  if (!data.ok()) return data.status();
  return ParseSpool(*data);
}

absl::StatusOr<std::unique_ptr<TrialSpool>> TrialSpool::Open(const std::string& path,
                                                            TrialSpoolOptions options) {
  // One writer per spool: two daemons started with the same worker id would interleave
  // appends. The lock lives on a side file because compaction replaces the spool file.
  const std::string lock_path = path + ".lock";
  int lock_fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd < 0) return ErrnoStatus("open", lock_path);
  if (::flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
    ::close(lock_fd);
    return absl::FailedPreconditionError(
        absl::StrCat("spool ", path, " is in use by another process (same --worker-id and --spool?)"));
  }
  absl::StatusOr<std::unique_ptr<TrialSpool>> spool = OpenLocked(path, options);
  if (!spool.ok()) {
    ::close(lock_fd);
    return spool.status();
  }
  (*spool)->lock_fd_ = lock_fd;
  return spool;
}

absl::StatusOr<std::unique_ptr<TrialSpool>> TrialSpool::OpenLocked(const std::string& path,
                                                                  TrialSpoolOptions options) {
  SpoolLog log;
  absl::StatusOr<std::string> data = ReadSpoolFile(path);
  if (data.ok()) {
    absl::StatusOr<SpoolLog> parsed = ParseSpool(*data);
    if (!parsed.ok()) return parsed.status();
    log = *std::move(parsed);
  } else if (!absl::IsNotFound(data.status())) {
    return data.status();
  }
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus("open", path);
  if (log.torn_tail) {
    // Drop the unfinished record so later appends follow a valid one.
    if (::ftruncate(fd, log.valid_bytes) != 0 || ::fsync(fd) != 0) {
      absl::Status s = ErrnoStatus("truncate torn tail of", path);
      ::close(fd);
      return s;
    }
  }
  if (::lseek(fd, log.valid_bytes, SEEK_SET) < 0) {
    absl::Status s = ErrnoStatus("seek", path);
    ::close(fd);
    return s;
  }
  if (!data.ok()) {
    if (absl::Status s = SyncDirectoryOf(path); !s.ok()) {
      ::close(fd);
      return s;
    }
  }
  std::unique_ptr<TrialSpool> spool(new TrialSpool(path, options, fd));
  absl::MutexLock lock(&spool->mu_);
  spool->file_bytes_ = log.valid_bytes;
  for (Trial& t : log.appended) {
    if (spool->ids_.insert(t.trial_id).second) spool->trials_.push_back(std::move(t));
  }
  for (std::string& id : log.acknowledged) {
    if (spool->ids_.contains(id)) spool->acked_.insert(std::move(id));
  }
  return spool;
}

TrialSpool::TrialSpool(std::string path, TrialSpoolOptions options, int fd)
    : path_(std::move(path)), options_(options), fd_(fd) {}

TrialSpool::~TrialSpool() {
  absl::MutexLock lock(&mu_);
  if (fd_ >= 0) ::close(fd_);
  if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the flock
}

absl::Status TrialSpool::AppendRecordLocked(uint8_t type, std::string_view payload) {
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat("spool ", path_, " is closed"));
  std::string rec = EncodeRecord(type, payload);
  if (absl::Status s = WriteAll(fd_, rec, path_); !s.ok()) {
    // A partial write leaves a torn record; cut it off so the next append is readable.
    (void)::ftruncate(fd_, file_bytes_);
    (void)::lseek(fd_, file_bytes_, SEEK_SET);
    return s;
  }
  if (options_.sync && ::fdatasync(fd_) != 0) return ErrnoStatus("fdatasync", path_);
  file_bytes_ += static_cast<int64_t>(rec.size());
  return absl::OkStatus();
}

absl::Status TrialSpool::RecordTrial(const Trial& trial) {
  if (trial.trial_id.empty()) return absl::InvalidArgumentError("trial without trial_id");
  absl::MutexLock lock(&mu_);
  if (ids_.contains(trial.trial_id)) return absl::OkStatus();
  if (absl::Status s = AppendRecordLocked(kTrialRecord, TrialToJson(trial)); !s.ok()) return s;
  ids_.insert(trial.trial_id);
  trials_.push_back(trial);
  return absl::OkStatus();
}

absl::Status TrialSpool::Acknowledge(std::span<const std::string> trial_ids) {
  absl::MutexLock lock(&mu_);
  for (const std::string& id : trial_ids) {
    if (!ids_.contains(id) || acked_.contains(id)) continue;
    if (absl::Status s = AppendRecordLocked(kAckRecord, id); !s.ok()) return s;
    acked_.insert(id);
  }
  return MaybeCompactLocked();
}

absl::Status TrialSpool::MaybeCompactLocked() {
  if (options_.compact_bytes <= 0 || file_bytes_ < options_.compact_bytes) return absl::OkStatus();
  if (acked_.size() != trials_.size()) return absl::OkStatus();
  // Nothing pending: replace the file by an empty one (rename is atomic, so a crash leaves
  // either the old complete log or the new empty one).
  const std::string tmp = path_ + ".tmp";
  int nfd = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (nfd < 0) return ErrnoStatus("open", tmp);
  if (::fsync(nfd) != 0 || ::rename(tmp.c_str(), path_.c_str()) != 0) {
    absl::Status s = ErrnoStatus("replace", path_);
    ::close(nfd);
    return s;
  }
  ::close(fd_);
  fd_ = nfd;
  file_bytes_ = 0;
  trials_.clear();
  ids_.clear();
  acked_.clear();
  return SyncDirectoryOf(path_);
}

std::vector<Trial> TrialSpool::Pending(size_t max) const {
  absl::MutexLock lock(&mu_);
  std::vector<Trial> out;
  for (const Trial& t : trials_) {
    if (out.size() >= max) break;
    if (!acked_.contains(t.trial_id)) out.push_back(t);
  }
  return out;
}

std::vector<Trial> TrialSpool::PendingWhere(size_t max,
                                            const std::function<bool(const Trial&)>& accept) const {
  absl::MutexLock lock(&mu_);
  std::vector<Trial> out;
  for (const Trial& t : trials_) {
    if (out.size() >= max) break;
    if (!acked_.contains(t.trial_id) && accept(t)) out.push_back(t);
  }
  return out;
}

size_t TrialSpool::pending_count() const {
  absl::MutexLock lock(&mu_);
  return trials_.size() - acked_.size();
}

size_t TrialSpool::PendingForRun(int64_t run_id) const {
  absl::MutexLock lock(&mu_);
  size_t n = 0;
  for (const Trial& t : trials_) {
    if (t.run_id == run_id && !acked_.contains(t.trial_id)) ++n;
  }
  return n;
}

std::vector<Trial> TrialSpool::TrialsForRun(int64_t run_id) const {
  absl::MutexLock lock(&mu_);
  std::vector<Trial> out;
  for (const Trial& t : trials_) {
    if (t.run_id == run_id) out.push_back(t);
  }
  return out;
}

}  // namespace fusetune
