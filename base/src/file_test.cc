#include "fusetune/base/file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <string>

namespace fusetune {
namespace {

using ::testing::HasSubstr;

std::string Write(const std::string& name, const std::string& bytes) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  return path;
}

TEST(ReadFileToString, ReadsBackEveryByteIncludingNulAndCarriageReturn) {
  const std::string bytes("a\0b\r\n\xff\0", 7);
  const std::string path = Write("file_test_binary", bytes);
  absl::StatusOr<std::string> read = ReadFileToString(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, bytes);
}

TEST(ReadFileToString, ReadsMoreThanOneBufferFull) {
  std::string bytes(200000, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 7);
  absl::StatusOr<std::string> read = ReadFileToString(Write("file_test_large", bytes));
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, bytes);
}

TEST(ReadFileToString, AnEmptyFileIsAnEmptyString) {
  absl::StatusOr<std::string> read = ReadFileToString(Write("file_test_empty", ""));
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, "");
}

TEST(ReadFileToString, AMissingFileIsNotFoundNamingThePathAndTheReason) {
  const std::string path = ::testing::TempDir() + "/file_test_no_such_file";
  absl::StatusOr<std::string> read = ReadFileToString(path);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(read.status().message()), HasSubstr("cannot read '" + path + "'"));
  EXPECT_THAT(std::string(read.status().message()), HasSubstr("No such file or directory"));
}

TEST(ReadFileToString, ADirectoryIsAnErrorNamingThePath) {
  const std::string path = ::testing::TempDir();
  absl::StatusOr<std::string> read = ReadFileToString(path);
  ASSERT_FALSE(read.ok());
  EXPECT_NE(read.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(read.status().message()), HasSubstr("cannot read '" + path + "'"));
  EXPECT_THAT(std::string(read.status().message()), HasSubstr("Is a directory"));
}

}  // namespace
}  // namespace fusetune
