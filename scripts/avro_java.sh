#!/usr/bin/env bash
# Fetches the Java implementation of Avro (org.apache.avro with the snappy and zstandard codecs)
# with Maven into ~/.cache/weir-avro-java, once, and prints `export WEIR_TEST_AVRO_JAVA=<dir>`:
# the directory of its jars, which the differential tests put on the class path of
# scripts/avro-java/AvroJava.java.
#
#   eval "$(scripts/avro_java.sh)"
set -euo pipefail

AVRO_VERSION="${WEIR_AVRO_JAVA_VERSION:-1.12.2}"
HOME_DIR="${WEIR_AVRO_JAVA_HOME:-$HOME/.cache/weir-avro-java}"
LIB="$HOME_DIR/lib-$AVRO_VERSION"

if [[ ! -f "$LIB/.complete" ]]; then
    command -v mvn >/dev/null || { echo "avro_java.sh: mvn not found (Maven fetches Avro's jars)" >&2; exit 1; }
    mkdir -p "$HOME_DIR/pom"
    # A throwaway project whose only job is to let Maven resolve Avro and the codecs' libraries
    # (optional dependencies of Avro, so named here).
    cat > "$HOME_DIR/pom/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>weir</groupId><artifactId>weir-avro-java</artifactId><version>1</version>
  <dependencies>
    <dependency><groupId>org.apache.avro</groupId><artifactId>avro</artifactId><version>$AVRO_VERSION</version></dependency>
    <dependency><groupId>org.xerial.snappy</groupId><artifactId>snappy-java</artifactId><version>1.1.10.8</version></dependency>
    <dependency><groupId>com.github.luben</groupId><artifactId>zstd-jni</artifactId><version>1.5.7-6</version></dependency>
    <dependency><groupId>org.slf4j</groupId><artifactId>slf4j-nop</artifactId><version>2.0.17</version></dependency>
  </dependencies>
</project>
POM
    rm -rf "$LIB.tmp"
    echo "avro_java.sh: fetching Apache Avro $AVRO_VERSION (Java) with Maven into $LIB" >&2
    mvn -q -B -f "$HOME_DIR/pom/pom.xml" dependency:copy-dependencies \
        -DoutputDirectory="$LIB.tmp" -DincludeScope=runtime >&2
    touch "$LIB.tmp/.complete"
    rm -rf "$LIB"
    mv "$LIB.tmp" "$LIB"
fi
command -v java >/dev/null || { echo "avro_java.sh: java not found (Java 17 or later runs the tests' Avro program)" >&2; exit 1; }
echo "export WEIR_TEST_AVRO_JAVA=$LIB"
