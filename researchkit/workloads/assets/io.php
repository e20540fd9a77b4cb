<?php
// researchkit runtimes-web, I/O endpoint: each GET, CYCLES times: open a text file, write its content to a new
// file, delete it. The new files go to the temporary directory (the container's own writable layer).
$t0 = hrtime(true);
$cycles = __CYCLES__;
$src = __DIR__ . '/input.txt';
$prefix = sys_get_temp_dir() . '/rkio-' . getmypid() . '-';
$bytes = 0;
header('Content-Type: application/json');
header('Cache-Control: no-store');
for ($i = 0; $i < $cycles; $i++) {
    $text = file_get_contents($src);
    $dst = $prefix . $i . '.txt';
    if ($text === false || file_put_contents($dst, $text) !== strlen($text) || !unlink($dst)) {
        $err = error_get_last();
        @unlink($dst);
        http_response_code(500);
        echo json_encode(['endpoint' => 'io', 'error' => $err ? $err['message'] : 'short write', 'cycle' => $i]), "\n";
        exit;
    }
    $bytes += strlen($text);
}
$t1 = hrtime(true);
$left = glob($prefix . '*');
echo json_encode(['endpoint' => 'io', 'cycles' => $cycles, 'bytes' => $bytes, 'file_bytes' => strlen($text),
                  'left' => $left === false ? -1 : count($left), 'dir' => sys_get_temp_dir(),
                  'server_s' => ($t1 - $t0) / 1e9, 'pid' => getmypid()]), "\n";
