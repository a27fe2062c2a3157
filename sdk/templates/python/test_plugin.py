# Run with: python3 -m unittest   (natively; no WebAssembly needed)
import unittest

import chitin_sdk
import plugin  # noqa: F401  (registers the tools)


class PluginTest(unittest.TestCase):
    def test_greets(self):
        self.assertEqual(chitin_sdk.invoke("greet", '{"name": "Ada", "times": 2}'), "Hello, Ada!\nHello, Ada!")

    def test_an_exception_is_a_failed_tool_error(self):
        with self.assertRaises(chitin_sdk.Failed) as e:
            chitin_sdk.invoke("greet", '{"name": " "}')
        self.assertIn("ValueError: `name` is empty", str(e.exception))

    def test_manifest(self):
        m = chitin_sdk.manifest()
        self.assertEqual(m["tools"][0]["parameters"]["required"], ["name"])


if __name__ == "__main__":
    unittest.main()
