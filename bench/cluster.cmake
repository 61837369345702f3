# bench/cluster_throughput.sh (scale-out on Redis) runs from BUILD/bench like
# the programs: copied there executable at configure time.
file(COPY ${CMAKE_CURRENT_SOURCE_DIR}/cluster_throughput.sh
     DESTINATION ${CMAKE_BINARY_DIR}/bench
     FILE_PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE
                      WORLD_READ WORLD_EXECUTE)
