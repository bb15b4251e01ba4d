# Sampling and stop conditions (included from src/engine/CMakeLists.txt).
add_library(deltafin_sampler STATIC ${CMAKE_CURRENT_LIST_DIR}/sampler.cc)
target_link_libraries(deltafin_sampler PUBLIC deltafin_util nlohmann_json::nlohmann_json fmt::fmt)
deltafin_test(sampler_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/sampler_test.cc LIBS deltafin_sampler)
