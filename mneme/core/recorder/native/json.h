// The little JSON the recorder writes: its manifests and counts files.
#pragma once

#include <stdint.h>
#include <stdio.h>

#include <map>
#include <string>
#include <vector>

namespace mneme_engine {

inline std::string hex(const std::string &bytes) {
    static const char *digits = "0123456789abcdef";
    std::string out;
    out.reserve(bytes.size() * 2);
    for (unsigned char c : bytes) {
        out.push_back(digits[c >> 4]);
        out.push_back(digits[c & 15]);
    }
    return out;
}

inline std::string json_string(const std::string &s) {
    std::string out = "\"";
    for (char c : s) {
        if (c == '"' || c == '\\') out.push_back('\\');
        if (static_cast<unsigned char>(c) < 0x20) continue;
        out.push_back(c);
    }
    return out + "\"";
}

// {"<instance key>": [seconds, ...], ...}
inline std::string times_json(const std::map<uint64_t, std::vector<double>> &times) {
    std::string text = "{";
    for (auto &entry : times) {
        char key[40];
        snprintf(key, sizeof key, "%s\"%016llx\": [", text.size() > 1 ? ", " : "", (unsigned long long)entry.first);
        text += key;
        for (size_t i = 0; i < entry.second.size(); ++i) {
            char v[32];
            snprintf(v, sizeof v, "%s%.9g", i ? ", " : "", entry.second[i]);
            text += v;
        }
        text += "]";
    }
    return text + "}";
}

}  // namespace mneme_engine
